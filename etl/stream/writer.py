"""``foreachBatch`` of the streaming label join: each micro-batch written into the stream's tables, exactly once."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.records.landing import RAW_COLUMN
from etl.records.quarantine import (
    PROBLEM_COLUMN,
    numbered_quarantine_rows,
    with_impression_problem,
    with_label_problem,
)
from etl.stream.plan import KIND, staging_columns
from etl.stream.tables import StreamTables
from schemas.registry import DatasetRegistry
from warehouse.tables import persisted


def batch_watermark(checkpoint: Path, batch_id: int) -> dt.datetime:
    """The event-time watermark micro-batch ``batch_id`` runs with: the join drops rows at or before it.

    Spark writes it into the batch's entry of its offset log (``offsets/<id>``: a version line,
    then the batch's metadata as JSON) before the batch runs, so a batch rerun after a crash
    gets the same value. Structured Streaming offers no public call for it inside ``foreachBatch``.
    """
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    millis = int(json.loads(lines[1])["batchWatermarkMs"])
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC)


@dataclass(frozen=True)
class BatchCounts:
    input_records: int
    output_rows: int
    quarantined: int
    late_labels: int
    watermark: dt.datetime


@dataclass
class BatchWriter:
    """``foreachBatch``: writes one micro-batch into the stream's tables, each write idempotent.

    Every write is a Delta append tagged with ``txnAppId`` (the table and the checkpoint's query id,
    stable across restarts) and ``txnVersion`` (the batch id): a batch run again after a crash skips
    the writes that had committed and makes the others, so each row lands exactly once.
    """

    registry: DatasetRegistry
    tables: StreamTables
    run_id: str  # this run of the stream: recorded with its quarantined records
    counts: dict[int, BatchCounts] = field(default_factory=dict)
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        watermark = batch_watermark(self.tables.checkpoint, batch_id)
        is_late = (F.col(KIND) == "label") & (F.col("label_time") <= F.lit(watermark))
        with persisted(batch) as batch:
            stats = batch.agg(
                F.count_if(F.col(KIND) != "row").alias("records"),
                F.count_if(F.col(KIND) == "row").alias("rows"),
                F.count_if(F.col(KIND).startswith("bad_")).alias("bad"),
                F.count_if(is_late).alias("late"),
            ).first()
            if stats["rows"]:
                self._append(batch.where(F.col(KIND) == "row").select(*staging_columns(self.registry)), "staging",
                             batch_id)  # fmt: skip
            if stats["bad"]:
                self._append(self._quarantine(batch), "quarantine", batch_id)
            if stats["late"]:
                self._append(self._late(batch.where(is_late), watermark, batch_id), "late_labels", batch_id)
        self.counts[batch_id] = BatchCounts(int(stats["records"]), int(stats["rows"]), int(stats["bad"]),
                                            int(stats["late"]), watermark)  # fmt: skip

    def _append(self, rows: DataFrame, table: str, batch_id: int) -> None:
        app_id = f"featurehouse-stream:{self.tables.dataset}:{self.tables.query_id()}:{table}"
        self.tables.append(rows, table, txn=(app_id, batch_id))

    def _quarantine(self, batch: DataFrame) -> DataFrame:
        """The batch's bad records as quarantine rows, with the batch job's problems and reasons."""
        now = self.clock()
        bad = batch.where(F.col(KIND).startswith("bad_"))
        empty_file = F.struct(F.lit("empty_file").alias("code"), F.lit("empty file").alias("reason"))
        impressions = with_impression_problem(bad.where(F.col(KIND) == "bad_impression"), self.registry, None)
        labels = with_label_problem(bad.where(F.col(KIND) == "bad_label"), [lab.name for lab in self.registry.labels])
        rows = []
        for frame, stream in ((impressions, "impressions"), (labels, "labels")):
            frame = frame.withColumn(PROBLEM_COLUMN, F.when(F.col("line").isNull(), empty_file)
                                     .otherwise(F.col(PROBLEM_COLUMN)))  # fmt: skip
            frame = frame.withColumn(RAW_COLUMN, F.coalesce(RAW_COLUMN, F.lit("")))
            rows.append(numbered_quarantine_rows(frame, stream, self.run_id, now))
        return rows[0].unionByName(rows[1])

    def _late(self, late: DataFrame, watermark: dt.datetime, batch_id: int) -> DataFrame:
        """Labels behind the watermark, with how late they are and, where it was already staged, their impression."""
        staged = (self.tables.read(late.sparkSession, "staging").join(late.select("impression_id"), "impression_id",
                  "left_semi").groupBy("impression_id").agg(F.min("event_time").alias("impression_time")))  # fmt: skip
        seconds = lambda later, earlier: F.unix_micros(later) / 1e6 - F.unix_micros(earlier) / 1e6  # noqa: E731
        return late.join(staged, "impression_id", "left").select(
            "impression_id",
            "label_type",
            F.col("label_time").alias("event_time"),
            F.lit(watermark).alias("watermark"),
            seconds(F.lit(watermark), F.col("label_time")).alias("late_by_s"),
            "impression_time",
            seconds(F.col("label_time"), F.col("impression_time")).alias("delay_s"),
            F.col("label_file").alias("source_file"),
            F.col("label_line").alias("line"),
            F.lit(batch_id).cast("long").alias("batch_id"),
            F.lit(self.clock()).alias("recorded_at"),
            "ds",
        )
