"""The stream's batches table: one row per micro-batch, its counts and the marks it left, written by the batch itself.

    <home>/streams/<dataset>/batches

:class:`etl.stream.writer.BatchWriter` appends a micro-batch's row as its last write, before Spark
writes the batch's commit file, with Delta's ``txnAppId``/``txnVersion`` (a batch run again after a
crash writes it once). The stream's driver loop reads the rows back through Spark for its progress
lines, its summary and the closed days; a restart reads the marks of the last row. So nothing of a
batch's outcome lives only in the process that ran it: over Spark Connect ``foreachBatch`` runs in the
engine's Python worker, not in the command's process.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from etl.stream.marks import History, Marks, legacy_marks
from etl.stream.tables import StreamTables

BATCHES_SCHEMA = T.StructType(
    [
        T.StructField("batch_id", T.LongType(), False),
        T.StructField("input_records", T.LongType(), True),  # null: a batch of a version that kept no counts
        T.StructField("staged", T.LongType(), True),  # impressions and labels appended to the records table
        T.StructField("quarantined", T.LongType(), True),  # malformed records and late impressions
        T.StructField("late_impressions", T.LongType(), True),
        T.StructField("late_labels", T.LongType(), True),
        T.StructField("watermark", T.TimestampType(), True),  # the watermark the batch judged its records by
        T.StructField("newest_impression", T.TimestampType(), True),  # the marks through this batch
        T.StructField("newest_label", T.TimestampType(), True),
        T.StructField("recorded_at", T.TimestampType(), False),
    ]
)
_TIMES = ("watermark", "newest_impression", "newest_label")


@dataclass(frozen=True)
class BatchCounts:
    input_records: int
    staged: int
    quarantined: int
    late_impressions: int
    late_labels: int
    watermark: dt.datetime | None


@dataclass(frozen=True)
class BatchRow:
    batch_id: int
    counts: BatchCounts
    marks: Marks


def utc(micros: int | None) -> dt.datetime | None:
    """A time collected as microseconds since the epoch (a collected timestamp would be naive, in the session's zone)."""
    return None if micros is None else dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def write_batch(spark: SparkSession, tables: StreamTables, row: BatchRow, *, app_id: str) -> None:
    """Append ``row``, once for its batch id (``txnAppId`` ``app_id``)."""
    c, m = row.counts, row.marks
    values = (row.batch_id, c.input_records, c.staged, c.quarantined, c.late_impressions, c.late_labels,
              c.watermark, m.impressions, m.labels, dt.datetime.now(dt.UTC))  # fmt: skip
    tables.append(spark.createDataFrame([values], BATCHES_SCHEMA), "batches", txn=(app_id, row.batch_id))


def read_batches(spark: SparkSession, tables: StreamTables, *, after: int | None = None) -> list[BatchRow]:
    """The rows of the batches after ``after`` (None: all), by batch id."""
    frame = tables.read(spark, "batches")
    if after is not None:
        frame = frame.where(F.col("batch_id") > after)
    counts = ("input_records", "staged", "quarantined", "late_impressions", "late_labels")
    rows = frame.select("batch_id", *counts, *(F.unix_micros(t).alias(t) for t in _TIMES)).collect()
    return sorted(
        (BatchRow(int(r["batch_id"]), BatchCounts(*(int(r[c] or 0) for c in counts), utc(r["watermark"])),
                  Marks(utc(r["newest_impression"]), utc(r["newest_label"]))) for r in rows),
        key=lambda r: r.batch_id,
    )  # fmt: skip


def history(spark: SparkSession, tables: StreamTables) -> History:
    """The marks every batch so far left."""
    return History({r.batch_id: r.marks for r in read_batches(spark, tables)})


def create(spark: SparkSession, tables: StreamTables) -> None:
    """Create the table; a checkpoint whose marks an earlier version kept as files gets them as rows (no counts)."""
    tables.create(spark, "batches", BATCHES_SCHEMA)
    legacy = legacy_marks(tables.checkpoint)
    if legacy and tables.read(spark, "batches").isEmpty():
        rows = [(i, None, None, None, None, None, None, m.impressions, m.labels, dt.datetime.now(dt.UTC))
                for i, m in sorted(legacy.items())]  # fmt: skip
        tables.append(spark.createDataFrame(rows, BATCHES_SCHEMA), "batches")
