"""The streaming label join against the batch one: real Spark, real Delta, real Kafka, real processes.

One generated landing zone (5 days of impressions, malformed records planted in day 1) is joined
by the batch job (day 1) and by the stream, which must publish the same partition row for row,
quarantine the same records for the same reasons, survive SIGKILL in the middle of a micro-batch,
leave the metastore to other commands while it runs, and keep a label later than the watermark.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from etl import label_join
from etl.stream import job as stream
from etl.records.landing import RecordKind
from etl.stream.tables import StreamTables
from schemas.registry import load_dataset
from etl.stream.publish import in_process_publisher
from tests.etl.stream_world import (
    DATASET,
    DAY,
    DS,
    QUARANTINE_COLUMNS,
    _batch_day,
    _config,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]



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
    # nothing waits in Spark's state: the query has no state store (the features are staged once, on arrival)
    tables = StreamTables(config.home, DATASET)
    progress = tables.read(spark, "progress").where(F.col("dataset") == DATASET).collect()
    assert progress and all(r.state_rows == 0 and r.state_memory_bytes == 0 for r in progress)
    # the staging view joins each staged impression to its staged labels
    view = tables.staged(spark, load_dataset(DATASET, config.registry_dir))
    records = tables.read(spark, "records")
    assert view.select("impression_id").distinct().count() == \
        records.where(F.col("record") == "impression").select("impression_id").distinct().count()  # fmt: skip
    assert view.where(F.col("label_type").isNotNull()).count() > 0


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


def test_a_restart_with_nothing_new_publishes_nothing_and_says_so(streamed, spark):
    config = streamed[0]
    summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
    assert summary.batches == 0 and summary.published == [] and summary.closed_through == DAY
    assert summary.watermark == streamed[1].watermark  # the marks of the last run, read back
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
        (["--max-bad-fraction", "2"], "--max-bad-fraction 2.0 is not a share"),
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
