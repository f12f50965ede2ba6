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


def _staged(spark, home: Path):
    return StreamTables(home, DATASET).read(spark, "staging")


def test_sigkill_mid_batch_then_restart_loses_and_repeats_nothing(world, streamed, spark):
    home, registry_dir, landing = world
    killed_home = home / "killed"
    args = ["stream", "--dataset", DATASET, "--home", str(killed_home), "--landing", str(landing),
            "--registry-dir", str(registry_dir), "--no-publish",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]  # fmt: skip
    tables = StreamTables(killed_home, DATASET)
    first_append = Path(tables.path("staging")) / "_delta_log" / f"{1:020d}.json"  # version 0 is the empty table
    first = _featurehouse(*args, "--trigger", "continuous", "--interval", "1s")
    deadline = time.monotonic() + 240
    while not first_append.exists():  # the batch has written its staging rows, its other writes are to come
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "the first micro-batch never wrote its rows"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert not _committed(tables.checkpoint, 0)  # killed in the middle of micro-batch 0

    # The restart is the documented spark-submit command line, and it publishes the closed day (a process of
    # its own, which must start its own JVM rather than reach for spark-submit's).
    env = {**os.environ, "FEATUREHOUSE_HOME": str(killed_home), "PYSPARK_PYTHON": sys.executable}
    spark_args = subprocess.run([sys.executable, "-m", "featurehouse.cli", "spark-args", *args[-4:]], cwd=REPO,
                                env=env, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    submit = [str(Path(sys.executable).parent / "spark-submit"), *spark_args, "etl/stream/job.py",
              *[a for a in args[1:] if a != "--no-publish"], "--trigger", "available-now"]  # fmt: skip
    rerun = subprocess.run(submit, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"ds={DS}  published  " in rerun.stdout + rerun.stderr
    staged, expected = _staged(spark, killed_home), _staged(spark, streamed[0].home)
    key = ["source_file", "line", "label_file", "label_line"]
    assert staged.count() == staged.select(*key).distinct().count() == expected.count() > 150  # nothing twice
    assertDataFrameEqual(staged, expected)  # nothing missing
    quarantined = tables.read(spark, "quarantine")
    assert quarantined.count() == StreamTables(streamed[0].home, DATASET).read(spark, "quarantine").count()

    # A continuous stream does not hold the embedded metastore: SQL runs beside it, then Ctrl-C stops it.
    live = _featurehouse(*args, "--trigger", "continuous", "--interval", "1s")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(live.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not any(f"stream {DATASET}: files -> " in line for line in lines):  # its query is starting
            assert live.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        query = f"SELECT count(*) AS n FROM featurehouse.{DATASET} WHERE ds = '{DS}'"
        sql = subprocess.run([sys.executable, "-m", "featurehouse.cli", "sql", "--home", str(killed_home), "--format",
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
