"""``foreachBatch`` of the streaming label join: each micro-batch staged into the stream's tables, exactly once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from etl.records.landing import RAW_COLUMN
from etl.records.quarantine import (
    PROBLEM_COLUMN,
    numbered_quarantine_rows,
    with_impression_problem,
    with_label_problem,
)
from etl.stream.batches import BatchCounts, BatchRow, history, utc, write_batch
from etl.stream.crash import kill_point
from etl.stream.marks import History
from etl.stream.plan import KIND, record_columns, window_interval
from etl.stream.tables import IMPRESSION, LABEL, StreamTables
from schemas.names import format_ds
from schemas.registry import DatasetRegistry
from warehouse.tables import persisted


def _seconds(later: Column, earlier: Column) -> Column:
    return F.unix_micros(later) / 1e6 - F.unix_micros(earlier) / 1e6


@dataclass
class BatchWriter:
    """``foreachBatch``: stages one micro-batch, judging its records by the marks of the batches before it.

    Valid impressions (with their features) and valid labels are appended to the records table as
    they arrive, unless late (:mod:`etl.stream.marks`): a late impression is quarantined as ``late``,
    a late label goes to the late-labels table. Malformed records are quarantined with the batch
    job's reasons. Every write is a Delta append tagged with ``txnAppId`` (the table and the
    checkpoint's query id, stable across restarts) and ``txnVersion`` (the batch id): a batch run
    again after a crash skips the writes that had committed and makes the others, so each record
    lands exactly once. The batch's row in the batches table (its counts and marks,
    :mod:`etl.stream.batches`) is written last, before Spark's commit file.

    Over Spark Connect this object runs in the engine's Python worker, not in the command's process:
    what the driver loop needs of a batch it reads from that table. The marks are read from it once
    per process and kept (``history``).
    """

    registry: DatasetRegistry
    tables: StreamTables
    run_id: str  # this run of the stream: recorded with its quarantined records
    delay: dt.timedelta
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    history: History | None = None  # the marks of the batches so far; read from the table at the first batch

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        kill_point(f"between:{batch_id}")
        if self.history is None:
            self.history = history(batch.sparkSession, self.tables)
        before = self.history.through(batch_id - 1)
        watermark = before.watermark(self.delay)
        closed = before.closed_through(self.registry, self.delay)
        kind = F.col(KIND)
        closed_ds = F.lit(format_ds(closed) if closed else "")  # "" sorts before every ds: nothing is closed
        late_impression = (kind == IMPRESSION) & (F.col("ds") <= closed_ds)
        # A label may be late only if the first day its impression can be on (its time less the longest window) is.
        first_day = F.date_format(F.col("event_time") - window_interval(self.registry), "yyyy-MM-dd")
        maybe_late = (kind == LABEL) & (first_day <= closed_ds)
        on_time = kind.isin(IMPRESSION, LABEL) & ~late_impression & ~maybe_late  # staged as they are
        with persisted(batch) as batch:
            stats = batch.agg(
                F.count("*").alias("records"),
                F.count_if(kind.startswith("bad_")).alias("bad"),
                F.count_if(late_impression).alias("late_impressions"),
                F.count_if(maybe_late).alias("maybe_late"),
                F.count_if(on_time).alias("staged"),
                # as microseconds since the epoch: a collected timestamp would be naive, in the session's time zone
                F.max(F.when(kind == IMPRESSION, F.unix_micros("event_time"))).alias("newest_impression"),
                F.max(F.when(kind == LABEL, F.unix_micros("event_time"))).alias("newest_label"),
            ).first()
            staged = batch.where(on_time)
            n_staged, late = int(stats["staged"]), None
            if stats["maybe_late"]:
                judged = self._judge_labels(batch, maybe_late, late_impression, closed)
                late = judged.where(F.col("impression_time").isNotNull())
                kept = judged.where(F.col("impression_time").isNull()).drop("impression_time")
                staged = staged.unionByName(kept)
                n_staged += int(stats["maybe_late"]) - (n_late := late.count())
            if n_staged:
                records = staged.select(kind.alias("record"), *record_columns(self.registry)[1:])
                self._append(records, "records", batch_id)
            kill_point(f"staged:{batch_id}")
            if stats["bad"] or stats["late_impressions"]:
                self._append(self._quarantine(batch, late_impression, watermark, closed), "quarantine", batch_id)
            if late is not None and n_late:
                self._append(self._late(late, watermark, batch_id), "late_labels", batch_id)
        marks = before.after(utc(stats["newest_impression"]), utc(stats["newest_label"]))
        counts = BatchCounts(
            int(stats["records"]), n_staged, int(stats["bad"]) + int(stats["late_impressions"]),
            int(stats["late_impressions"]), n_late if late is not None else 0, watermark,
        )  # fmt: skip
        write_batch(batch.sparkSession, self.tables, BatchRow(batch_id, counts, marks), app_id=self._app_id("batches"))
        self.history = self.history.with_batch(batch_id, marks)

    def _append(self, rows: DataFrame, table: str, batch_id: int) -> None:
        self.tables.append(rows, table, txn=(self._app_id(table), batch_id))

    def _app_id(self, table: str) -> str:
        return f"featurehouse-stream:{self.tables.dataset}:{self.tables.query_id()}:{table}"

    def _judge_labels(self, batch: DataFrame, maybe_late: Column, late_impression: Column, closed: dt.date) -> DataFrame:
        """The labels that may be late, each with its impression's time if that impression's ds is closed (late)."""
        spark = batch.sparkSession
        closed_impressions = (
            self.tables.read(spark, "records")
            .where((F.col("ds") <= format_ds(closed)) & (F.col("record") == IMPRESSION))
            .select("impression_id", "event_time")
            .unionByName(batch.where(late_impression).select("impression_id", "event_time"))
            .groupBy("impression_id").agg(F.min("event_time").alias("impression_time"))
        )  # fmt: skip
        return batch.where(maybe_late).join(closed_impressions, "impression_id", "left")

    def _quarantine(self, batch: DataFrame, late_impression: Column, watermark: dt.datetime | None,
                    closed: dt.date | None) -> DataFrame:  # fmt: skip
        """The batch's bad records with the batch job's problems and reasons, and its late impressions."""
        now = self.clock()
        empty_file = F.struct(F.lit("empty_file").alias("code"), F.lit("empty file").alias("reason"))
        impressions = with_impression_problem(batch.where(F.col(KIND) == "bad_impression"), self.registry, None)
        labels = with_label_problem(batch.where(F.col(KIND) == "bad_label"), [lab.name for lab in self.registry.labels])
        rows = []
        for frame, stream in ((impressions, "impressions"), (labels, "labels")):
            frame = frame.withColumn(PROBLEM_COLUMN, F.when(F.col("line").isNull(), empty_file)
                                     .otherwise(F.col(PROBLEM_COLUMN)))  # fmt: skip
            frame = frame.withColumn(RAW_COLUMN, F.coalesce(RAW_COLUMN, F.lit("")))
            rows.append(numbered_quarantine_rows(frame, stream, self.run_id, now))
        if closed is not None:
            reason = F.format_string(
                f"arrived after its ds was closed (the stream had closed the days through {format_ds(closed)}; "
                "its event time is %.0f s behind the watermark %s); rerun the batch label join of the ds to include it",
                _seconds(F.lit(watermark), F.col("event_time")), F.lit(watermark.isoformat()))  # fmt: skip
            late = batch.where(late_impression).withColumn(PROBLEM_COLUMN, F.struct(
                F.lit("late").alias("code"), reason.alias("reason"))).withColumn(RAW_COLUMN, F.lit(""))  # fmt: skip
            rows.append(numbered_quarantine_rows(late, "impressions", self.run_id, now))
        out = rows[0]
        for frame in rows[1:]:
            out = out.unionByName(frame)
        return out

    def _late(self, late: DataFrame, watermark: dt.datetime, batch_id: int) -> DataFrame:
        """Labels whose impression's ds was closed, with how late they are and their delay after the impression."""
        return late.select(
            "impression_id",
            "label_type",
            "event_time",
            F.lit(watermark).alias("watermark"),
            _seconds(F.lit(watermark), F.col("event_time")).alias("late_by_s"),
            "impression_time",
            _seconds(F.col("event_time"), F.col("impression_time")).alias("delay_s"),
            "source_file",
            "line",
            F.lit(batch_id).cast("long").alias("batch_id"),
            F.lit(self.clock()).alias("recorded_at"),
            "ds",
        )
