"""The stream killed with SIGKILL at three points, each restarted three ways; a continuous stream beside SQL.

Real Spark, Delta and processes: each kill run is the real command (``featurehouse stream``, or the
documented spark-submit command line), killed by the test-only hook ``FEATUREHOUSE_STREAM_KILL_AT``
(``etl/stream/crash.py``) and checked against its checkpoint's offsets and commits files. Each
restart runs the same arguments, parsed by the command's own parser, in this test session, from a
copy of the killed stream's folder: with new records on the impression side only, on the label
side only, and on both. Every closed day must then be published once and equal the batch job's
partition of the same logs; every record staged once; late labels exactly the planted one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from etl.stream import job as stream
from etl.stream.tables import StreamTables
from etl.stream.publish import in_process_publisher
from tests.etl.stream_world import (
    DATASET,
    DAY,
    DS,
    REPO,
    _batch_day,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _featurehouse(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "featurehouse.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)  # fmt: skip


def _committed(checkpoint: Path, batch: int) -> bool:
    return (checkpoint / "commits" / str(batch)).exists()


# ------------------------------------------------------------------ kill -9 at three points, three restarts each

KILLED = f"{DATASET}_kill"
DAY5 = "2026-11-05"


def _files(root: Path, stream: str, days: set[str]) -> list[Path]:
    return sorted(p for p in (root / stream).rglob("*.jsonl") if p.parts[-3].removeprefix("ds=") in days)


@pytest.fixture(scope="module")
def kill_logs(world, tmp_path_factory):
    """The logs of the kill cases, from the world's landing zone (one registry, ``<dataset>_kill``):

    * ``base``: impressions of days 1-3 and labels of days 1-4 (every label of day 1's windows): no day closes
      under them (their newest event is before day 5, and day 1 closes once the watermark passes day 5 01:00);
    * ``impressions``: the impressions of day 5 (new records on the impression side only): day 1 closes;
    * ``labels``: the labels of days 5 on, and one more at day 5 12:00 (new records on the label side only): day 1
      closes; day 2 does not, since the impressions have not passed its end;
    * ``late``: a click 5 minutes after one of day 1's impressions, planted once day 1 is closed: late.
    """
    home, registry_dir, landing = world
    (registry_dir / f"{KILLED}.yaml").write_text(
        (registry_dir / f"{DATASET}.yaml").read_text().replace(f"dataset: {DATASET}", f"dataset: {KILLED}"))
    logs = tmp_path_factory.mktemp("kill_logs")
    days = lambda first, last: {f"2026-11-{d:02d}" for d in range(first, last + 1)}  # noqa: E731
    parts = {
        "base": _files(landing, "impressions", days(1, 3)) + _files(landing, "labels", days(1, 4)),
        "impressions": _files(landing, "impressions", days(5, 5)),
        "labels": _files(landing, "labels", days(5, 9)),
    }
    for name, files in parts.items():
        for f in files:
            target = logs / name / f.relative_to(landing)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
    mark = {"impression_id": "no-such-impression", "label_type": "click", "event_time": f"{DAY5}T12:00:00.000Z"}
    _write_line(logs / "labels" / "labels" / f"ds={DAY5}" / "hour=12" / "part-mark.jsonl", mark)
    first = min((json.loads(line) for f in _files(landing, "impressions", {DS}) for line in f.read_text().splitlines()
                 if line.startswith("{") and "bad-" not in line), key=lambda r: r["impression_id"])  # fmt: skip
    at = dt.datetime.fromisoformat(first["event_time"].replace("Z", "+00:00")) + dt.timedelta(minutes=5)
    late = {"impression_id": first["impression_id"], "label_type": "click",
            "event_time": at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}  # fmt: skip
    _write_line(logs / "late" / "labels" / f"ds={DS}" / "hour=05" / "part-planted.jsonl", late)
    return logs, registry_dir, late


def _write_line(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record) + "\n")


def _put(logs: Path, part: str, landing: Path) -> list[Path]:
    """Copy the files of ``part`` into ``landing``; returns them, to take away again."""
    written = []
    for f in (logs / part).rglob("*.jsonl"):
        target = landing / f.relative_to(logs / part)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
        written.append(target)
    return written


def _stream_args(home: Path, landing: Path, registry_dir: Path, *extra: str) -> list[str]:
    return ["--dataset", KILLED, "--home", str(home), "--landing", str(landing), "--registry-dir", str(registry_dir),
            "--trigger", "available-now", *extra, "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2"]  # fmt: skip


def _spark_submit(args: list[str], home: Path) -> list[str]:
    """The documented spark-submit command line of ``featurehouse stream`` with ``args``."""
    env = {**os.environ, "FEATUREHOUSE_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    spark_args = subprocess.run([sys.executable, "-m", "featurehouse.cli", "spark-args", *args[-4:]], cwd=REPO,
                                env=env, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return [str(Path(sys.executable).parent / "spark-submit"), *spark_args, "etl/stream/job.py", *args]


def _txn_versions(table: str) -> set[int]:
    """The ``txnVersion`` (micro-batch ids) of the appends in a Delta table's log."""
    versions = set()
    for entry in Path(table, "_delta_log").glob("*.json"):
        for line in entry.read_text().splitlines():
            if '"txn"' in line:
                versions.add(json.loads(line)["txn"]["version"])
    return versions


KILL_POINTS = {"staged": "staged:1", "between": "between:1", "publishing": "published"}


@pytest.fixture(scope="module")
def killed(kill_logs, tmp_path_factory):
    """The three kill runs, started together, each in a session of its own and killed by the test-only hook:

    * ``staged``: micro-batch 1 of the base logs has appended its records, and has no commit file;
    * ``between``: micro-batch 0 has its commit file, 1 has its offsets and has written nothing;
    * ``publishing``: the base logs and the label-side logs in one micro-batch, which closes day 1; stream-publish
      (a process of its own, killed with the stream) has replaced day 1's partition and not recorded its decision.
    The stream of ``publishing`` is the documented spark-submit command line.
    """
    logs, registry_dir, _ = kill_logs
    root = tmp_path_factory.mktemp("killed")
    runs = {}
    for point, hook in KILL_POINTS.items():
        home, landing = root / point / "home", root / point / "landing"
        _put(logs, "base", landing)
        if point == "publishing":
            _put(logs, "labels", landing)
            command = _spark_submit(_stream_args(home, landing, registry_dir), home)
        else:
            command = [sys.executable, "-m", "featurehouse.cli", "stream",
                       *_stream_args(home, landing, registry_dir, "--max-files-per-trigger", "24")]  # fmt: skip
        env = {**os.environ, "FEATUREHOUSE_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
               "FEATUREHOUSE_STREAM_KILL_AT": hook}  # fmt: skip
        runs[point] = (home, landing, command, subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True))  # fmt: skip
    out = {}
    for point, (home, landing, command, process) in runs.items():
        output = process.communicate(timeout=400)[0]
        assert process.returncode == -signal.SIGKILL, f"{point}: exit {process.returncode}\n{output[-3000:]}"
        out[point] = (home, landing, command, output)
    return out


def test_each_kill_stopped_where_it_was_told(killed, spark):
    for point, (home, _, _, output) in killed.items():
        tables = StreamTables(home, KILLED)
        checkpoint, records = tables.checkpoint, tables.path("records")
        if point == "staged":
            assert _committed(checkpoint, 0) and (checkpoint / "offsets" / "1").exists()
            assert not _committed(checkpoint, 1) and _txn_versions(records) == {0, 1}, output[-2000:]
        elif point == "between":
            assert _committed(checkpoint, 0) and (checkpoint / "offsets" / "1").exists()
            assert not _committed(checkpoint, 1) and _txn_versions(records) == {0}, output[-2000:]
        else:
            assert _committed(checkpoint, 0) and not (checkpoint / "offsets" / "1").exists(), output[-2000:]
            table = Path(home) / "warehouse" / "featurehouse.db" / KILLED
            assert spark.read.format("delta").load(str(table)).where(F.col("ds") == DS).count() > 100
            assert tables.read(spark, "days").count() == 0  # replaced, and killed before its decision was recorded


def _relative(records) -> list[tuple]:
    """Staged records by where they came from, relative to their landing root."""
    return sorted(records.select("record", F.regexp_extract("source_file", r"/((impressions|labels)/ds=.*)$", 1),
                                 "line", "impression_id", "label_type", "ds").collect())  # fmt: skip


@pytest.fixture(scope="module")
def streamed_records(streamed, spark) -> list[tuple]:
    """What the uninterrupted stream staged from the whole landing zone."""
    return _relative(StreamTables(streamed[0].home, DATASET).read(spark, "records"))


def _check_restart(spark, home: Path, table, landing: Path, late: dict | None, streamed_records: list[tuple],
                   label: str) -> None:  # fmt: skip
    """After a restart: day 1 decided once and equal to batch, no other day decided, every record of the landing
    zone staged once (as the uninterrupted stream staged it), the late label (if planted) alone in late labels."""
    tables = StreamTables(home, KILLED)
    days = [(r.ds, r.decision) for r in tables.read(spark, "days").collect()]
    assert days == [(DS, "published")], label
    assertDataFrameEqual(table.where(F.col("ds") == DS), _batch_day(spark))
    files = {str(p.relative_to(landing)) for p in landing.rglob("*.jsonl")}
    expected = [r for r in streamed_records if r[1] in files]
    expected += [("label", str(p.relative_to(landing)), 1, "no-such-impression", "click", DAY5)
                 for p in landing.rglob("part-mark.jsonl")]  # fmt: skip
    assert _relative(tables.read(spark, "records")) == sorted(expected), label  # nothing twice, nothing missing
    lates = [(r.impression_id, r.label_type, r.delay_s) for r in tables.read(spark, "late_labels").collect()]
    assert lates == ([(late["impression_id"], "click", pytest.approx(300.0))] if late else []), label
    quarantined = [(r.source_file, r.line) for r in tables.read(spark, "quarantine").select("source_file", "line").collect()]
    assert len(quarantined) == len(set(quarantined)) == 6, label


RESTARTS = {"impressions": ("impressions",), "labels": ("labels",), "both": ("impressions", "labels")}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_restart_after_kill_publishes_every_closed_day_once(point, killed, kill_logs, streamed_records, spark,
                                                            tmp_path_factory):  # fmt: skip
    """For each kill point, three restarts with the same arguments from copies of the killed stream's folder: new
    records on the impression side only, the label side only, both; in this session (its metastore)."""
    logs, registry_dir, late = kill_logs
    home, landing, _, _ = killed[point]
    sides = {name: tuple("late" if (point == "publishing" and s == "labels") else s for s in parts)
             for name, parts in RESTARTS.items()}  # after a kill in publishing, the labels' new record is a late one
    copies = {}
    for name in sides:
        copies[name] = tmp_path_factory.mktemp(f"restart_{point}_{name}")
        shutil.copytree(Path(home) / "streams", copies[name] / "streams")
    for name, parts in sides.items():
        added = [f for part in parts for f in _put(logs, part, landing)]
        try:
            planted = late if "late" in parts else None
            argv = _stream_args(copies[name], landing, registry_dir)
            config = stream.parse_args(argv)
            summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
            assert summary.published == [f"through {DS}"] and summary.closed_through == DAY, f"{point}/{name}"
            _check_restart(spark, copies[name], spark.table(f"featurehouse.{KILLED}"), landing, planted,
                           streamed_records, f"{point}/{name}")  # fmt: skip
        finally:
            for f in added:
                f.unlink()


def test_a_continuous_stream_leaves_the_metastore_to_sql_and_stops_on_ctrl_c(killed, kill_logs, spark):
    """A continuous stream does not hold the embedded metastore: SQL runs beside it, then Ctrl-C stops it. (Its
    home is the one whose stream-publish was killed after replacing day 1's partition: SQL reads that partition.)"""
    _, registry_dir, _ = kill_logs
    home, landing, _, _ = killed["publishing"]
    args = ["stream", *_stream_args(home, landing, registry_dir, "--no-publish")]
    args[args.index("available-now")] = "continuous"
    live = _featurehouse(*args, "--interval", "1s")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(live.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not any(f"stream {KILLED}: files -> " in line for line in lines):  # its query is starting
            assert live.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        query = f"SELECT count(*) AS n FROM featurehouse.{KILLED} WHERE ds = '{DS}'"
        sql = subprocess.run([sys.executable, "-m", "featurehouse.cli", "sql", "--home", str(home), "--format",
                              "json", query], cwd=REPO, capture_output=True, text=True, timeout=180)  # fmt: skip
        assert sql.returncode == 0, sql.stderr
        assert json.loads(sql.stdout) == [{"n": _batch_day(spark).count()}]
        assert live.poll() is None  # still streaming
    finally:
        time.sleep(3)  # a few idle triggers
        live.send_signal(signal.SIGINT)
        live.wait(120)
    out = "".join(lines)
    assert live.returncode == 0, out
    assert "stopped by SIGINT after the current micro-batch" in out


