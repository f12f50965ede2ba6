"""The stream killed with SIGKILL at three points, each restarted three ways; a continuous stream on the engine beside
a label join and SQL, its client killed, restarted and stopped by Ctrl-C.

Real Spark, Delta, processes and engine: each kill run is the real command (``featurehouse stream`` in a session of
its own, on the engine, or the documented spark-submit command line), killed by the test-only hook
``FEATUREHOUSE_STREAM_KILL_AT`` (``etl/stream/crash.py``) and checked against its checkpoint's offsets and commits
files. Each
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
from warehouse.tables import persisted
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
            "--trigger", "available-now", *extra, "--conf", "spark.sql.shuffle.partitions=2"]  # fmt: skip


#: For a stream with a session of its own (no UI); on the engine a static setting is refused, naming the restart.
NO_UI = ("--conf", "spark.ui.enabled=false")


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


def _killed_streams(home: Path) -> Path:
    """The stream folder of the kill run of ``home`` as the kill left it."""
    return Path(home).parent / "killed_streams"


@pytest.fixture(scope="module")
def killed(kill_logs, tmp_path_factory):
    """The three kill runs, started together, each in a session of its own and killed by the test-only hook:

    * ``staged``: micro-batch 1 of the base logs has appended its records, and has no commit file (``--engine
      off``: the stream's own session, killed with it);
    * ``between``: micro-batch 0 has its commit file, 1 has its offsets and has written nothing. This stream is a
      client of the home's engine, which it starts with the hook in its environment: the hook runs in the engine's
      Python worker (``foreachBatch``) and kills the engine, not the client, which must say so and exit;
    * ``publishing``: the base logs and the label-side logs in one micro-batch, which closes day 1; stream-publish
      (a process of its own, killed with the stream) has replaced day 1's partition and not recorded its decision.
    The stream of ``publishing`` is the documented spark-submit command line. It is the longest of the three (a
    micro-batch, then a process that starts the home's engine and publishes on it), so it starts first.

    Each run's stream folder is also kept as the kill left it (``<point>/killed_streams``): the restarts copy
    that, since the continuous test goes on in the ``publishing`` home itself.
    """
    logs, registry_dir, _ = kill_logs
    root = tmp_path_factory.mktemp("killed")
    runs = {}
    for point in sorted(KILL_POINTS, key=lambda p: p != "publishing"):
        hook = KILL_POINTS[point]
        home, landing = root / point / "home", root / point / "landing"
        _put(logs, "base", landing)
        if point == "publishing":
            _put(logs, "labels", landing)
            command = _spark_submit(_stream_args(home, landing, registry_dir, *NO_UI), home)
        else:
            own = point == "staged"
            command = [sys.executable, "-m", "featurehouse.cli", "stream", "--engine", "off" if own else "auto",
                       *_stream_args(home, landing, registry_dir, "--max-files-per-trigger", "24",
                                     *(NO_UI if own else ()))]  # fmt: skip
        env = {**os.environ, "FEATUREHOUSE_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
               "FEATUREHOUSE_STREAM_KILL_AT": hook}  # fmt: skip
        runs[point] = (home, landing, command, subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True))  # fmt: skip
    out = {}
    try:
        for point in KILL_POINTS:  # the shorter runs first: their output is read as they end
            home, landing, command, process = runs[point]
            output = process.communicate(timeout=400)[0]
            if point == "between":  # the engine was killed under its client
                assert process.returncode == 2, f"{point}: exit {process.returncode}\n{output[-3000:]}"
                assert f"the engine for {home.resolve()} stopped while this command ran" in output, output[-3000:]
            else:
                assert process.returncode == -signal.SIGKILL, f"{point}: exit {process.returncode}\n{output[-3000:]}"
            shutil.copytree(Path(home) / "streams", _killed_streams(home))
            out[point] = (home, landing, command, output)
    finally:  # a run left behind by a failure here goes, with its process group
        for *_, process in runs.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
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


@pytest.fixture(scope="module")
def batch_day(spark):
    """The batch job's partition of day 1 (``_batch_day``), read once and kept in this session's memory: the
    partition every restart's published day 1 is compared with."""
    with persisted(_batch_day(spark)) as rows:
        rows.count()
        yield rows


def _check_restart(spark, home: Path, table, landing: Path, late: dict | None, streamed_records: list[tuple],
                   batch_day, label: str) -> None:  # fmt: skip
    """After a restart: day 1 decided once and equal to batch, no other day decided, every record of the landing
    zone staged once (as the uninterrupted stream staged it), the late label (if planted) alone in late labels."""
    tables = StreamTables(home, KILLED)
    days = [(r.ds, r.decision) for r in tables.read(spark, "days").collect()]
    assert days == [(DS, "published")], label
    assertDataFrameEqual(table.where(F.col("ds") == DS), batch_day)
    files = {str(p.relative_to(landing)) for p in landing.rglob("*.jsonl")}
    expected = [r for r in streamed_records if r[1] in files]
    expected += [("label", str(p.relative_to(landing)), 1, "no-such-impression", "click", DAY5)
                 for p in landing.rglob("part-mark.jsonl")]  # fmt: skip
    assert _relative(tables.read(spark, "records")) == sorted(expected), label  # nothing twice, nothing missing
    lates = [(r.impression_id, r.label_type, r.delay_s) for r in tables.read(spark, "late_labels").collect()]
    assert lates == ([(late["impression_id"], "click", pytest.approx(300.0))] if late else []), label
    quarantined = [(r.source_file, r.line) for r in tables.read(spark, "quarantine").select("source_file", "line").collect()]
    assert len(quarantined) == len(set(quarantined)) == 6, label


def _follow(process: subprocess.Popen) -> list[str]:
    """The lines ``process`` prints, collected as they come."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    return lines


def _wait_for(process: subprocess.Popen, lines: list[str], text: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(text in line for line in lines):
        assert process.poll() is None and time.monotonic() < deadline, f"waited for {text!r}:\n" + "".join(lines)
        time.sleep(0.2)


def _batch_ids(checkpoint: Path, folder: str) -> set[int]:
    return {int(p.name) for p in (checkpoint / folder).iterdir() if p.name.isdigit()}


def test_a_continuous_stream_on_the_engine_beside_a_label_join_and_sql(killed, kill_logs, world, streamed_records,
                                                                       batch_day, spark):  # fmt: skip
    """On the embedded default, at once and all clients of one engine: a continuous stream of one dataset, which
    publishes the day its killed stream-publish left undecided; a label join of another dataset; four SQL queries.
    Then the stream's client is killed with SIGKILL: the engine closes its session and stops its query (files that
    land next are not read). The same command resumes from the checkpoint, stages them once, and stops on Ctrl-C.

    It runs in the home of the kill in publishing, right after the kills: the engine the killed stream-publish
    started there is then still up (it stops after 5 idle minutes in tests), and the stream becomes its client.
    The restarts copy that kill's stream folder as the kill left it (``killed``), not this test's."""
    logs, registry_dir, _ = kill_logs
    _, _, world_landing = world
    home, landing, _, _ = killed["publishing"]
    tables = StreamTables(home, KILLED)
    args = ["stream", *_stream_args(home, landing, registry_dir), "--interval", "1s"]
    args[args.index("available-now")] = "continuous"
    live = _featurehouse(*args)
    lines = _follow(live)
    added: list[Path] = []
    try:
        _wait_for(live, lines, f"stream {KILLED}: files -> ")  # its session is open: the engine runs
        query = f"SELECT count(*) AS n FROM featurehouse.{KILLED} WHERE ds = '{DS}'"  # replaced before the kill
        join = _featurehouse("label-join", "--dataset", f"{DATASET}_batch", "--ds", DS, "--home", str(home),
                             "--landing", str(world_landing), "--registry-dir", str(registry_dir),
                             "--conf", "spark.sql.shuffle.partitions=2")  # fmt: skip
        questions = [subprocess.Popen([sys.executable, "-m", "featurehouse.cli", "sql", "--home", str(home), "--format",
                                       "json", query], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for _ in range(4)]  # fmt: skip
        joined = join.communicate(timeout=300)[0]
        assert join.returncode == 0, joined[-3000:]
        answers = [q.communicate(timeout=300) for q in questions]
        batch_rows = batch_day.count()
        for q, (out, err) in zip(questions, answers):
            assert q.returncode == 0, err[-3000:]
            assert json.loads(out) == [{"n": batch_rows}], out  # one Delta commit replaces it: never part
        assert "starting the engine" not in joined  # the stream's engine served it
        _wait_for(live, lines, f"stream-publish {KILLED}: 1 day(s) through {DS}")
        published = spark.read.format("delta").load(str(Path(home) / "warehouse" / "featurehouse.db" / f"{DATASET}_batch"))
        assertDataFrameEqual(published.where(F.col("ds") == DS), batch_day)

        live.kill()  # SIGKILL of the client alone: the engine, in a session of its own, runs on
        live.wait(30)
        log = Path(home) / "engine" / "engine.log"
        deadline = time.monotonic() + 30
        while f"client pid {live.pid} is gone" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        offsets = _batch_ids(tables.checkpoint, "offsets")
        added = _put(logs, "impressions", landing)
        time.sleep(6)  # six triggers of a query that still ran
        assert _batch_ids(tables.checkpoint, "offsets") == offsets, "the dead client's query read new files"

        again = _featurehouse(*args)
        lines = _follow(again)
        deadline = time.monotonic() + 180
        while not _batch_ids(tables.checkpoint, "commits") - offsets:
            assert again.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.5)
        again.send_signal(signal.SIGINT)
        again.wait(120)
        out = "".join(lines)
        assert again.returncode == 0, out[-3000:]
        assert "stopped by SIGINT after the current micro-batch" in out
        _check_restart(spark, home, spark.read.format("delta").load(str(Path(home) / "warehouse" / "featurehouse.db"
                                                                        / KILLED)),  # fmt: skip
                       landing, None, streamed_records, batch_day, "engine")
    finally:
        for process in (live, *([again] if "again" in locals() else [])):
            if process.poll() is None:
                process.kill()
        for f in added:
            f.unlink()


RESTARTS = {"impressions": ("impressions",), "labels": ("labels",), "both": ("impressions", "labels")}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_restart_after_kill_publishes_every_closed_day_once(point, killed, kill_logs, streamed_records, batch_day,
                                                            spark, tmp_path_factory):  # fmt: skip
    """For each kill point, three restarts with the same arguments from copies of the killed stream's folder: new
    records on the impression side only, the label side only, both; in this session (its metastore)."""
    logs, registry_dir, late = kill_logs
    home, landing, _, _ = killed[point]
    sides = {name: tuple("late" if (point == "publishing" and s == "labels") else s for s in parts)
             for name, parts in RESTARTS.items()}  # after a kill in publishing, the labels' new record is a late one
    copies = {}
    for name in sides:
        copies[name] = tmp_path_factory.mktemp(f"restart_{point}_{name}")
        shutil.copytree(_killed_streams(home), copies[name] / "streams")
    for name, parts in sides.items():
        added = [f for part in parts for f in _put(logs, part, landing)]
        try:
            planted = late if "late" in parts else None
            argv = _stream_args(copies[name], landing, registry_dir)
            config = stream.parse_args(argv)
            summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
            assert summary.published == [f"through {DS}"] and summary.closed_through == DAY, f"{point}/{name}"
            _check_restart(spark, copies[name], spark.table(f"featurehouse.{KILLED}"), landing, planted,
                           streamed_records, batch_day, f"{point}/{name}")  # fmt: skip
        finally:
            for f in added:
                f.unlink()
