"""The streaming label join against the batch one: real Spark, real Delta, real Kafka, real processes.

One generated landing zone (5 days of impressions, malformed records planted in day 1) is joined
by the batch job (day 1) and by the stream, which must publish the same partition row for row,
quarantine the same records for the same reasons, survive SIGKILL in the middle of a micro-batch,
leave the metastore to other commands while it runs, and keep a label later than the watermark.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
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

from etl import label_join
from etl.stream import job as stream
from etl.generate.job import GenerateConfig
from etl.generate.job import run as generate
from etl.records.landing import RecordKind
from etl.stream.tables import StreamTables
from etl.stream.publish import in_process_publisher
from tests.conftest import SMALL_REGISTRY

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DATASET = "t_stream"
DAY = dt.date(2026, 11, 1)
DS = "2026-11-01"
REPO = Path(__file__).resolve().parents[2]
QUARANTINE_COLUMNS = ["stream", "source_file", "line", "raw", "problem", "reason", "ds"]

BAD_IMPRESSIONS = [
    '{"impression_id": "bad-1", "event_time": "2026-11-01T05:00:00Z", "dense": {',  # truncated
    json.dumps({"impression_id": "bad-2", "user_id": 1, "item_id": 2, "event_time": "2026-11-01T05:01:00Z",
                "dense": {"user_ctr_7d": "abc"}}),  # fmt: skip
    json.dumps({"impression_id": "bad-3", "user_id": 1, "item_id": 2, "event_time": "2026-11-02T05:01:00Z"}),
    "",
]
BAD_LABELS = [json.dumps({"impression_id": "x", "label_type": "share", "event_time": "2026-11-01T05:02:00Z"}), "{"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, spark):
    """The landing zone, its registries (the stream's dataset and a copy for the batch job), day 1 joined in batch."""
    home = tmp_path_factory.mktemp("stream_world")
    registry_dir = home / "registry"
    registry_dir.mkdir()
    for name in (DATASET, f"{DATASET}_batch", f"{DATASET}_kafka"):
        # a day of 150 impressions carries 4 planted bad ones; only the gate's bad-record limit is widened
        (registry_dir / f"{name}.yaml").write_text(SMALL_REGISTRY.format(dataset=name) + "quality: {max_bad_fraction: 0.5}\n")
    generate(GenerateConfig(home=home, dataset=DATASET, registry_dir=registry_dir, days=5, impressions_per_day=150,
                            users=500, items=200, seed=3))  # fmt: skip
    landing = home / "landing"
    for stream_name, lines in (("impressions", BAD_IMPRESSIONS), ("labels", BAD_LABELS)):
        folder = landing / stream_name / f"ds={DS}" / "hour=05"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part-bad.jsonl").write_text("\n".join(lines) + "\n")
    batch = label_join.run(spark, label_join.LabelJoinConfig(dataset=f"{DATASET}_batch", ds=DAY, home=home / "batch",
                                                             landing=str(landing), registry_dir=registry_dir))  # fmt: skip
    assert batch.published and batch.quarantined_impressions == 4 and batch.quarantined_labels == 2
    return home, registry_dir, landing


def _config(home: Path, registry_dir: Path, landing: Path, **kw) -> stream.StreamConfig:
    return stream.StreamConfig(dataset=kw.pop("dataset", DATASET), home=home, landing=str(landing),
                               registry_dir=registry_dir, **kw)  # fmt: skip


@pytest.fixture(scope="module")
def streamed(world, spark):
    """The stream over the whole landing zone, available-now, publishing in this process."""
    home, registry_dir, landing = world
    config = _config(home / "files", registry_dir, landing)
    summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
    return config, summary


def _batch_day(spark):
    return spark.table(f"featurehouse.{DATASET}_batch").where(F.col("ds") == DS)


def test_stream_publishes_the_batch_partition_row_for_row(streamed, spark):
    config, summary = streamed
    # all files in one micro-batch, whose marks close day 1: no batch without data is needed to close it
    assert summary.batches == 1 and summary.watermark > dt.datetime(2026, 11, 5, tzinfo=dt.UTC)
    assert summary.published == [f"through {DS}"]
    streamed_day = spark.table(f"featurehouse.{DATASET}").where(F.col("ds") == DS)
    assert streamed_day.count() == _batch_day(spark).count() > 100
    assert streamed_day.agg(F.sum("label_click")).first()[0] > 0
    assertDataFrameEqual(streamed_day, _batch_day(spark))
    # later days stay staged: their windows have not closed under the watermark
    days = StreamTables(config.home, DATASET).read(spark, "days")
    assert [(r.ds, r.decision) for r in days.collect()] == [(DS, "published")]


def test_malformed_records_are_quarantined_as_in_batch(streamed, spark):
    config, summary = streamed
    tables = StreamTables(config.home, DATASET)
    quarantined = tables.read(spark, "quarantine").where(F.col("ds") == DS)
    batch = spark.table(f"featurehouse_quarantine.{DATASET}_batch").where(F.col("ds") == DS)
    assert quarantined.count() == 6
    assertDataFrameEqual(quarantined.select(*QUARANTINE_COLUMNS), batch.select(*QUARANTINE_COLUMNS))
    assert summary.quarantined >= 6  # and the stream went on: the day was published


def test_kafka_source_publishes_the_batch_partition(world, spark, kafka_broker):
    from etl.kafka import produce

    home, registry_dir, landing = world
    dataset = f"{DATASET}_kafka"
    assert produce.main(["--dataset", dataset, "--ds", DS, "--days", "8", "--bootstrap", kafka_broker.bootstrap,
                         "--home", str(home)]) == 0  # fmt: skip
    config = stream.StreamConfig(dataset=dataset, home=home / "kafka", registry_dir=registry_dir,
                                 source=stream.Source.KAFKA, bootstrap=kafka_broker.bootstrap, max_offsets=2000)
    summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
    assert summary.published == [f"through {DS}"]
    assertDataFrameEqual(spark.table(f"featurehouse.{dataset}").where(F.col("ds") == DS), _batch_day(spark))
    quarantined = StreamTables(config.home, dataset).read(spark, "quarantine")
    # The same records for the same reasons, but a Kafka record has no landing folder: its ds is its event
    # time's (bad-3 is a good record of the next day, not outside_ds), else the day it arrived; and an empty
    # line is no record.
    expected = spark.table(f"featurehouse_quarantine.{DATASET}_batch").where(
        (F.col("ds") == DS) & (F.col("raw") != "") & (F.col("problem") != "outside_ds"))
    assertDataFrameEqual(quarantined.select("stream", "raw", "problem", "reason"),
                         expected.select("stream", "raw", "problem", "reason"))  # fmt: skip
    assert {r.source_file for r in quarantined.collect()} == {f"kafka:{config.topic(s)}/0" for s in RecordKind}


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


def _relative(records):
    """Staged records by where they came from, relative to their landing root."""
    return records.select("record", F.regexp_extract("source_file", r"/((impressions|labels)/ds=.*)$", 1).alias("file"),
                          "line", "impression_id", "label_type", "ds")  # fmt: skip


def _check_restart(spark, home: Path, table, landing: Path, late: dict | None, streamed_home: Path, label: str):
    """After a restart: day 1 decided once and equal to batch, no other day decided, every record of the landing
    zone staged once (as the uninterrupted stream staged it), the late label (if planted) alone in late labels."""
    tables = StreamTables(home, KILLED)
    days = [(r.ds, r.decision) for r in tables.read(spark, "days").collect()]
    assert days == [(DS, "published")], label
    assertDataFrameEqual(table.where(F.col("ds") == DS), _batch_day(spark))
    records = _relative(tables.read(spark, "records"))
    assert records.count() == records.select("record", "file", "line").distinct().count(), label  # nothing twice
    files = {str(p.relative_to(landing)) for p in landing.rglob("*.jsonl")}
    expected = _relative(StreamTables(streamed_home, DATASET).read(spark, "records")).where(F.col("file").isin(files))
    mark = records.where(F.col("impression_id") == "no-such-impression")
    assertDataFrameEqual(records.where(F.col("impression_id") != "no-such-impression"), expected)  # nothing missing
    assert mark.count() == (1 if any("part-mark" in f for f in files) else 0), label
    lates = [(r.impression_id, r.label_type, r.delay_s) for r in tables.read(spark, "late_labels").collect()]
    assert lates == ([(late["impression_id"], "click", pytest.approx(300.0))] if late else []), label
    quarantined = tables.read(spark, "quarantine")
    assert quarantined.count() == quarantined.select("source_file", "line").distinct().count() == 6, label


RESTARTS = {"impressions": ("impressions",), "labels": ("labels",), "both": ("impressions", "labels")}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_restart_after_kill_publishes_every_closed_day_once(point, killed, kill_logs, streamed, spark,
                                                            tmp_path_factory):  # fmt: skip
    """For each kill point, three restarts with the same arguments from copies of the killed stream's folder: new
    records on the impression side only, the label side only, both. In process (this session's metastore), but
    for the last restart after the publish was killed, which is the same spark-submit command in the killed home."""
    logs, registry_dir, late = kill_logs
    home, landing, command, _ = killed[point]
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
            if point == "publishing" and name == "both":
                env = {**os.environ, "FEATUREHOUSE_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
                rerun = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
                assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
                assert f"ds={DS}  published  " in rerun.stdout + rerun.stderr
                table = spark.read.format("delta").load(str(Path(home) / "warehouse" / "featurehouse.db" / KILLED))
                _check_restart(spark, home, table, landing, planted, streamed[0].home, f"{point}/{name}")
                continue
            argv = _stream_args(copies[name], landing, registry_dir)
            config = stream.parse_args(argv)
            summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
            assert summary.published == [f"through {DS}"] and summary.closed_through == DAY, f"{point}/{name}"
            _check_restart(spark, copies[name], spark.table(f"featurehouse.{KILLED}"), landing, planted,
                           streamed[0].home, f"{point}/{name}")  # fmt: skip
        finally:
            for f in added:
                f.unlink()


def test_a_continuous_stream_leaves_the_metastore_to_sql_and_stops_on_ctrl_c(killed, kill_logs, spark):
    """A continuous stream does not hold the embedded metastore: SQL runs beside it, then Ctrl-C stops it."""
    _, registry_dir, _ = kill_logs
    home, landing, _, _ = killed["publishing"]
    args = ["stream", *_stream_args(home, landing, registry_dir)]
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


def test_a_restart_with_nothing_new_publishes_nothing_and_says_so(streamed, spark):
    config = streamed[0]
    summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
    assert summary.batches == 0 and summary.published == [] and summary.closed_through == DAY
    assert f"none new (every closed day through {DS} was decided before)" in summary.format()


def test_too_many_bad_label_records_refuse_the_day_as_batch_does(world, streamed, spark, tmp_path):
    """The stream's publish step with a lower --max-bad-fraction than the registry's: day 1's label records are
    25% malformed (its impressions 2.6%), so the day is refused for its labels, in the batch job's words."""
    from etl.stream import publish
    from schemas.errors import DataRefusedError

    home, registry_dir, landing = world
    shutil.copytree(streamed[0].home / "streams" / DATASET, tmp_path / "streams" / DATASET,
                    ignore=shutil.ignore_patterns("days"))  # fmt: skip
    summary = publish.run(spark, publish.StreamPublishConfig(dataset=DATASET, through=DAY, home=tmp_path,
                                                             registry_dir=registry_dir, max_bad_fraction=0.1))
    [decision] = summary.decisions
    assert not decision.published and "label records of ds 2026-11-01" in decision.detail
    assert "impression records" not in decision.detail
    assert [r.decision for r in StreamTables(tmp_path, DATASET).read(spark, "days").collect()] == ["refused"]
    with pytest.raises(DataRefusedError) as refused:
        label_join.run(spark, label_join.LabelJoinConfig(dataset=f"{DATASET}_batch", ds=DAY, home=home / "batch",
                                                         landing=str(landing), registry_dir=registry_dir,
                                                         max_bad_fraction=0.1))  # fmt: skip
    words = re.search(r"\d+ of \d+ label records of ds 2026-11-01 \([\d.]+%\)", str(refused.value)).group(0)
    assert words in decision.detail


def test_a_checkpoint_of_the_previous_plan_is_refused_with_the_reset_steps(spark, tmp_path, world):
    from schemas.errors import ConfigError

    home, registry_dir, landing = world
    config = _config(tmp_path, registry_dir, landing)
    offsets = StreamTables(tmp_path, DATASET).checkpoint / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1\n{}\n")  # what the stream-stream join's checkpoint holds, without our plan's mark
    with pytest.raises(ConfigError, match="previous plan .* move .*checkpoint.* aside"):
        stream.run(spark, config)


def test_label_later_than_the_watermark_is_kept_and_counted(world, streamed, spark):
    home, registry_dir, landing = world
    config = streamed[0]
    impression = spark.table(f"featurehouse.{DATASET}").where(F.col("ds") == DS).orderBy("impression_id").first()
    label_time = impression.event_time + dt.timedelta(minutes=5)
    late = {"impression_id": impression.impression_id, "label_type": "click",
            "event_time": label_time.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}  # fmt: skip
    late_file = landing / "labels" / f"ds={DS}" / "hour=05" / "part-late.jsonl"
    late_file.write_text(json.dumps(late) + "\n")
    try:
        summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
    finally:
        late_file.unlink()
    assert summary.late_labels == 1
    tables = StreamTables(config.home, DATASET)
    rows = tables.read(spark, "late_labels").collect()
    assert [(r.impression_id, r.label_type, r.ds) for r in rows] == [(impression.impression_id, "click", DS)]
    assert rows[0].delay_s == pytest.approx(300.0) and rows[0].late_by_s > 3 * 86400
    progress = tables.read(spark, "progress").where(F.col("late_labels") > 0).collect()
    assert [(r.dataset, r.late_labels, r.late_rows_dropped) for r in progress] == [(DATASET, 1, 1)]
    # the published day did not change: the late label is not counted, nor the day decided again
    assert spark.table(f"featurehouse.{DATASET}").where(
        (F.col("ds") == DS) & (F.col("impression_id") == impression.impression_id)).first().label_click == \
        impression.label_click  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "kafka"], "--source kafka needs --bootstrap HOST:PORT"),
        (["--bootstrap", "127.0.0.1:9092"], "--bootstrap is for --source kafka"),
        (["--interval", "5x"], "--interval '5x' is not a duration"),
        (["--watermark-delay", "0s"], "--watermark-delay '0s' is not a duration"),
        (["--max-files-per-trigger", "0"], "--max-files-per-trigger must be a positive whole number"),
    ],
)
def test_bad_flags_are_refused_naming_the_fix(argv, message):
    from schemas.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        stream.parse_args(["--dataset", "ads", *argv])


def test_a_missing_landing_folder_is_named(spark, tmp_path):
    from schemas.errors import LandingError

    config = stream.StreamConfig(dataset="ads", home=tmp_path, landing=str(tmp_path / "nowhere"))
    with pytest.raises(LandingError, match="no impressions folder .*nowhere/impressions"):
        stream.run(spark, config)
