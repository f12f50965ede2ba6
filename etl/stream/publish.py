"""Publish the days a stream has closed: its staged rows of each ds through the batch job's quality gate.

    featurehouse stream-publish --dataset ads --through 2026-11-03

Each time its watermark closes a day, the stream (``featurehouse stream``) runs this: in its own
session when it runs on the engine (which holds the metastore); as a short process of its own
when the stream has a session of its own (``--engine off``, spark-submit), whose session never
opens the metastore. Run by hand, it publishes what is closed and not yet decided; it is
idempotent.

For each staged ds up to ``--through`` that has no decision yet, in order:

* the copies of each impression collapse to one, as in the batch job: the earliest event time,
  then the first file and line (Kafka: partition and offset);
* its staged labels (those of the ds and of the days its longest window reaches) count where
  ``0 <= label time - impression time <= the window of their type``, else 0;
* more than ``max_bad_fraction`` (``--max-bad-fraction``, else the registry's) malformed impression
  records of the ds, or malformed label records of the ds, refuse it before the gate, as in batch;
* the rows are validated and published by :func:`warehouse.publish.audit_and_publish`, the batch
  job's gate: a passing ds replaces its partition of ``featurehouse.<dataset>`` in one commit, a
  refused one is kept in a staging table of its run for ``featurehouse publish``;
* the decision is appended to the stream's days table, so that the ds is not decided again.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from etl.records.attribution import feature_rows, window_days, window_micros
from etl.stream.crash import kill_point
from etl.stream.tables import DAYS_SCHEMA, IMPRESSION, LABEL, StreamTables
from schemas.bad_records import bad_fraction_limit, check_max_bad_fraction, too_many_bad
from schemas.config import DatasetJobConfig
from schemas.errors import EXIT_REFUSED, DataRefusedError
from schemas.names import format_ds, parse_ds
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import DatasetRegistry, load_dataset
from warehouse.command import run_spark_job
from warehouse.evolution import prepare_for_write
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.publish import audit_and_publish, new_run_id
from warehouse.tables import persisted

if TYPE_CHECKING:
    from etl.stream.job import StreamConfig


@dataclass(frozen=True, kw_only=True)
class StreamPublishConfig(DatasetJobConfig):
    through: dt.date
    max_bad_fraction: float | None = None  # None: the registry's quality.max_bad_fraction

    def __post_init__(self) -> None:
        super().__post_init__()
        check_max_bad_fraction(self.max_bad_fraction)


@dataclass(frozen=True)
class DayDecision:
    ds: str
    published: bool
    rows: int
    late_labels: int
    detail: str  # the table version, or where the refused rows and report are


@dataclass(frozen=True)
class StreamPublishSummary:
    dataset: str
    through: str
    decisions: tuple[DayDecision, ...]

    def format(self) -> str:
        if not self.decisions:
            return f"stream-publish {self.dataset}: no staged day through {self.through} is waiting for the gate"
        lines = [f"stream-publish {self.dataset}: {len(self.decisions)} day(s) through {self.through}"]
        lines += [f"  ds={d.ds}  {'published' if d.published else 'REFUSED'}  {d.rows:,} rows, "
                  f"{d.late_labels:,} late labels dropped  {d.detail}" for d in self.decisions]  # fmt: skip
        return "\n".join(lines)


def day_rows(records: DataFrame, registry: DatasetRegistry, ds: dt.date) -> DataFrame:
    """The feature table's rows of ``ds`` from the stream's staged records (see the module docstring)."""
    rows = records.where((F.col("record") == IMPRESSION) & (F.col("ds") == format_ds(ds)))
    copy = F.struct("event_time", "source_file", "split_start", "line")
    winners = rows.groupBy("impression_id").agg(F.min(copy).alias("_first")).select(
        "impression_id", *[F.col(f"_first.{c}").alias(c) for c in ("event_time", "source_file", "split_start", "line")]
    )
    kept = rows.join(winners, ["impression_id", "event_time", "source_file", "split_start", "line"], "left_semi")
    last_label_day = ds + dt.timedelta(days=window_days(registry))
    labels = records.where((F.col("record") == LABEL) & F.col("ds").between(format_ds(ds), format_ds(last_label_day)))
    delay = F.unix_micros(F.col("l.event_time")) - F.unix_micros(F.col("i.event_time"))
    attributed = kept.alias("i").join(labels.alias("l"), "impression_id").select(
        "impression_id", F.col("l.label_type").alias("label_type"), delay.alias("delay_us"),
    ).withColumn("in_window", (F.col("delay_us") >= 0) & (F.col("delay_us") <= window_micros(registry)))
    return feature_rows(kept.dropDuplicates(["impression_id"]), attributed, registry, ds)


def run(spark: SparkSession, config: StreamPublishConfig, *, progress: Progress | None = None) -> StreamPublishSummary:
    """Decide every staged ds through ``config.through`` that has no decision yet (see the module docstring)."""
    say = progress or silent
    registry = load_dataset(config.dataset, config.registry_dir)
    tables = StreamTables(config.home, config.dataset)
    tables.create(spark, "days", DAYS_SCHEMA)
    tables.register(spark, registry)
    table, changes = prepare_for_write(spark, registry)
    for change in changes:
        say(f"{config.dataset}: {change.action.value} {change.detail}")
    staged = tables.read(spark, "records")
    through = format_ds(config.through)
    waiting = tables.waiting_days(spark, config.through)  # the ds strings of Spark rows
    decisions = [_decide(spark, config, registry, tables, table, staged, parse_ds(ds), say) for ds in waiting]
    return StreamPublishSummary(config.dataset, through, tuple(decisions))


def _decide(spark: SparkSession, config: StreamPublishConfig, registry: DatasetRegistry, tables: StreamTables,
            table: str, staged: DataFrame, day: dt.date, progress: Progress) -> DayDecision:  # fmt: skip
    run_id = new_run_id()
    ds = format_ds(day)
    # malformed records of the ds by source (late impressions are quarantined too, but are not malformed)
    bad = (tables.read(spark, "quarantine").where((F.col("ds") == ds) & (F.col("problem") != "late"))
           .groupBy("stream").count().collect())  # fmt: skip
    bad_by_stream = {r["stream"]: int(r["count"]) for r in bad}
    late = tables.read(spark, "late_labels")
    with persisted(day_rows(staged, registry, day)) as rows:
        bad_imps, bad_labels = bad_by_stream.get("impressions", 0), bad_by_stream.get("labels", 0)
        read = rows.count() + bad_imps
        # the label records of the ds, as batch counts them: every record of the ds, valid (staged or late) or not
        labels_read = (staged.where((F.col("record") == LABEL) & (F.col("ds") == ds)).count()
                       + late.where(F.col("ds") == ds).count() + bad_labels)  # fmt: skip
        late_labels = late.join(rows.select("impression_id"), "impression_id", "left_semi").count()
        limit = bad_fraction_limit(registry.quality, config.max_bad_fraction)
        refusals = [too_many_bad(bad_imps, read, limit, what=f"impression records of ds {ds}"),
                    too_many_bad(bad_labels, labels_read, limit, what=f"label records of ds {ds}")]  # fmt: skip
        if too_many := "; ".join(filter(None, refusals)):
            detail = (f"{too_many}; see {tables.name('quarantine')} WHERE ds = '{ds}'. Fix the logs and publish the "
                      "day with the batch label join, or allow more with the stream's --max-bad-fraction (or "
                      "quality.max_bad_fraction in the registry)")  # fmt: skip
            _record(spark, tables, day, "refused", run_id, read - bad_imps, late_labels, None, None)
            progress(f"{config.dataset} ds={ds}: refused before the gate: {detail}")
            return DayDecision(ds, False, read - bad_imps, late_labels, detail)
        gate = audit_and_publish(spark, registry, rows, table=table, day=day, run_id=run_id, home=config.home,
                                 quarantined=(bad_imps, bad_labels), progress=progress)  # fmt: skip
    kill_point("published")
    decision = "published" if gate.published else "refused"
    _record(spark, tables, day, decision, run_id, gate.report.rows, late_labels, str(gate.report_path),
            None if gate.published else gate.staged)  # fmt: skip
    detail = (f"-> {table} (Delta version {gate.commit.version})" if gate.published
              else f"rows kept in {gate.staged}, report {gate.report_path}")  # fmt: skip
    return DayDecision(ds, gate.published, gate.report.rows, late_labels, detail)


def _record(spark: SparkSession, tables: StreamTables, ds: dt.date, decision: str, run_id: str, rows: int,
            late_labels: int, report_path: str | None, staging_table: str | None) -> None:  # fmt: skip
    row = (format_ds(ds), decision, run_id, rows, late_labels, report_path, staging_table, dt.datetime.now(dt.UTC))
    tables.append(spark.createDataFrame([row], DAYS_SCHEMA), "days")


def in_process_publisher(spark: SparkSession, config: StreamConfig, *, progress: Progress | None = None,
                         report: Callable[[str], None] | None = None) -> Callable[[dt.date], int]:  # fmt: skip
    """A ``publisher`` for :func:`etl.stream.job.run` that decides the closed days in this session, not in a process
    of its own: for a session that holds the metastore (a stream on the engine, the demo, tests); returns
    ``featurehouse stream-publish``'s exit status.

    ``config``: the stream's (its dataset, home and registry folder are the publish step's too). ``report``: where
    the summary goes (default: stdout).
    """

    def publish(through: dt.date) -> int:
        summary = run(spark, StreamPublishConfig(
            dataset=config.dataset, through=through, home=config.home, registry_dir=config.registry_dir,
            max_bad_fraction=config.max_bad_fraction,
        ), progress=progress)  # fmt: skip
        (report or (lambda text: print(text, flush=True)))(summary.format())
        return 0 if all(d.published for d in summary.decisions) else EXIT_REFUSED

    return publish


def parse_args(argv: Sequence[str] | None = None) -> StreamPublishConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse stream-publish",
        description="Validate and publish the days a stream has staged and closed (what `featurehouse stream` runs "
        "each time its watermark closes a day): each through the same quality gate as the batch label join.",
    )
    parser.add_argument("--dataset", required=True, help="dataset name; its registry is <registry-dir>/<dataset>.yaml")
    parser.add_argument("--through", required=True, help="the last closed ds, YYYY-MM-DD: staged days up to it are decided")
    parser.add_argument("--max-bad-fraction", type=float, default=None, metavar="SHARE",
                        help="refuse a ds if more than this share of its impression or label records is malformed "
                        "(default: the registry's quality.max_bad_fraction)")  # fmt: skip
    add_common_arguments(parser)
    add_engine_argument(parser)
    ns = parser.parse_args(argv)
    return StreamPublishConfig(dataset=ns.dataset, through=parse_ds(ns.through), max_bad_fraction=ns.max_bad_fraction,
                               **common_settings(ns), **engine_settings(ns))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    def publish(spark: SparkSession, config: StreamPublishConfig) -> StreamPublishSummary:
        summary = run(spark, config, progress=stderr_progress)
        if any(not d.published for d in summary.decisions):
            raise DataRefusedError(f"{sum(not d.published for d in summary.decisions)} staged day(s) of "
                                   f"{config.dataset} were refused", details=summary.format())  # fmt: skip
        return summary

    return run_spark_job(lambda: parse_args(argv), publish)


if __name__ == "__main__":
    raise SystemExit(main())
