"""Where a dataset's stream keeps its state and output: Delta tables by path, named in the metastore.

The streaming job addresses every table it writes by path, so that a stream with a session of its
own never opens the metastore (Derby admits one JVM: a stream that held it would lock every other
command out for its whole life). The publish step registers the paths under their names (``CREATE
TABLE ... LOCATION``), so SQL sees them live::

    <home>/streams/<dataset>/checkpoint     Spark's checkpoint (offsets, commits), and the stream's plan
    <home>/streams/<dataset>/batches        one row per micro-batch: its counts and marks (etl.stream.batches)
    <home>/streams/<dataset>/records        featurehouse_staging.<dataset>_stream_records  staged records, not yet gated
                                            featurehouse_staging.<dataset>_stream          a view: impressions joined to labels
    <home>/streams/<dataset>/quarantine     featurehouse_quarantine.<dataset>_stream       malformed records
    <home>/streams/<dataset>/late_labels    featurehouse_quarantine.<dataset>_late_labels  labels behind the watermark
    <home>/streams/<dataset>/days           featurehouse_staging.<dataset>_stream_days     the gate's decision per ds
    <home>/streams/progress                 featurehouse_catalog.stream_progress           one row per micro-batch
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from etl.records.quarantine import DATABASE as QUARANTINE_DATABASE
from schemas.catalog import CATALOG_DATABASE
from schemas.names import format_ds, validate_name
from schemas.registry import DatasetRegistry
from warehouse.publish import STAGING_DATABASE
from warehouse.tables import create_delta_sql, in_metastore
from etl.stream.plan import staged_impression_columns

#: The ``record`` of a staged record: an impression (its features) or a label.
IMPRESSION, LABEL = "impression", "label"

LATE_LABELS_SCHEMA = T.StructType(
    [
        T.StructField("impression_id", T.StringType(), True),
        T.StructField("label_type", T.StringType(), True),
        T.StructField("event_time", T.TimestampType(), True),
        T.StructField("watermark", T.TimestampType(), False),
        T.StructField("late_by_s", T.DoubleType(), True),  # watermark - event_time
        T.StructField("impression_time", T.TimestampType(), True),  # null: the impression was not staged yet
        T.StructField("delay_s", T.DoubleType(), True),  # event_time - impression_time: the label's own delay
        T.StructField("source_file", T.StringType(), True),
        T.StructField("line", T.LongType(), True),
        T.StructField("batch_id", T.LongType(), False),
        T.StructField("recorded_at", T.TimestampType(), False),
        T.StructField("ds", T.StringType(), True),  # the label's ds
    ]
)

PROGRESS_SCHEMA = T.StructType(
    [
        T.StructField("dataset", T.StringType(), False),
        T.StructField("source", T.StringType(), False),
        T.StructField("run_id", T.StringType(), False),
        T.StructField("batch_id", T.LongType(), False),
        T.StructField("batch_time", T.TimestampType(), True),
        T.StructField("input_rows", T.LongType(), True),
        T.StructField("output_rows", T.LongType(), True),  # rows appended to the staging table
        T.StructField("quarantined", T.LongType(), True),
        T.StructField("late_labels", T.LongType(), True),
        T.StructField("late_rows_dropped", T.LongType(), True),  # records not joined: late impressions and labels
        T.StructField("watermark", T.TimestampType(), True),
        T.StructField("state_rows", T.LongType(), True),  # Spark's state store: none since the records plan
        T.StructField("state_memory_bytes", T.LongType(), True),
        T.StructField("duration_ms", T.LongType(), True),
        T.StructField("published", T.StringType(), True),  # days published after this batch, comma-separated
    ]
)

DAYS_SCHEMA = T.StructType(
    [
        T.StructField("ds", T.StringType(), False),
        T.StructField("decision", T.StringType(), False),  # published | refused
        T.StructField("run_id", T.StringType(), False),
        T.StructField("rows", T.LongType(), True),
        T.StructField("late_labels", T.LongType(), True),
        T.StructField("report_path", T.StringType(), True),
        T.StructField("staging_table", T.StringType(), True),  # a refused ds's rows, for featurehouse publish
        T.StructField("decided_at", T.TimestampType(), False),
    ]
)


@dataclass(frozen=True)
class StreamTables:
    """The paths and names of one dataset's stream under ``home``."""

    home: Path
    dataset: str

    def __post_init__(self) -> None:
        validate_name("dataset", self.dataset)

    @property
    def folder(self) -> Path:
        return Path(self.home).resolve() / "streams" / self.dataset

    @property
    def checkpoint(self) -> Path:
        return self.folder / "checkpoint"

    def query_id(self) -> str:
        """The id Spark gave the query of this checkpoint (its ``metadata`` file): it survives restarts from it."""
        return json.loads((self.checkpoint / "metadata").read_text().splitlines()[0])["id"]

    def path(self, table: str) -> str:
        """The folder of ``table`` (records, quarantine, late_labels, days; progress is shared by datasets)."""
        if table == "progress":
            return str(Path(self.home).resolve() / "streams" / "progress")
        return str(self.folder / table)

    def name(self, table: str) -> str:
        return {
            "staging": f"{STAGING_DATABASE}.{self.dataset}_stream",  # the view over the records
            "records": f"{STAGING_DATABASE}.{self.dataset}_stream_records",
            "days": f"{STAGING_DATABASE}.{self.dataset}_stream_days",
            "quarantine": f"{QUARANTINE_DATABASE}.{self.dataset}_stream",
            "late_labels": f"{QUARANTINE_DATABASE}.{self.dataset}_late_labels",
            "progress": f"{CATALOG_DATABASE}.stream_progress",
        }[table]

    def read(self, spark: SparkSession, table: str) -> DataFrame:
        """``table`` read by its path (no metastore)."""
        return spark.read.format("delta").load(self.path(table))

    def append(self, rows: DataFrame, table: str, *, txn: tuple[str, int] | None = None) -> None:
        """Append ``rows`` to ``table`` by its path; ``txn`` (``txnAppId``, ``txnVersion``) makes a repeat a no-op."""
        writer = rows.write.format("delta").mode("append")
        if txn is not None:
            writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
        writer.save(self.path(table))

    def create(self, spark: SparkSession, table: str, schema: T.StructType, *, partitioned: bool = False) -> None:
        """Create ``table`` at its path if it is not there (by path: no metastore)."""
        spark.sql(create_delta_sql(f"delta.`{self.path(table)}`", schema, partitioned_by=["ds"] if partitioned else []))

    def register(self, spark: SparkSession, registry: DatasetRegistry) -> None:
        """Name every table of the stream in the metastore (``CREATE TABLE IF NOT EXISTS ... LOCATION``), and the
        staging view over its records (:func:`staging_sql`)."""
        for table in ("records", "days", "quarantine", "late_labels", "progress"):
            name = self.name(table)
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {name.split('.')[0]}")
            spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{self.path(table)}'")
        self._drop_staging_table(spark)
        spark.sql(f"CREATE OR REPLACE VIEW {self.name('staging')} AS {staging_sql(self.path('records'), registry)}")

    def _drop_staging_table(self, spark: SparkSession) -> None:
        """Drop the previous plan's staging table under the view's name (external: its files stay)."""
        view = self.name("staging")
        if in_metastore(spark, view) and spark.sql(f"SHOW VIEWS IN {STAGING_DATABASE} LIKE '{view.split('.')[1]}'").isEmpty():
            spark.sql(f"DROP TABLE {view}")

    def unregister(self, spark: SparkSession) -> None:
        """Drop every name of the stream from the metastore (the files stay)."""
        self._drop_staging_table(spark)
        spark.sql(f"DROP VIEW IF EXISTS {self.name('staging')}")
        for table in ("records", "days", "quarantine", "late_labels"):
            spark.sql(f"DROP TABLE IF EXISTS {self.name(table)}")

    def staged(self, spark: SparkSession, registry: DatasetRegistry) -> DataFrame:
        """What readers query as the stream's staging (the view of :meth:`register`), read by path."""
        return spark.sql(staging_sql(self.path("records"), registry))

    def waiting_days(self, spark: SparkSession, through: dt.date) -> list[str]:
        """The days with staged impressions through ``through`` that have no decision yet (read by path)."""
        staged = self.read(spark, "records").where((F.col("ds") <= format_ds(through)) & (F.col("record") == IMPRESSION))
        decided = {r.ds for r in self.read(spark, "days").select("ds").distinct().collect()}
        return sorted({r.ds for r in staged.select("ds").distinct().collect()} - decided)


def staging_sql(records: str, registry: DatasetRegistry) -> str:
    """The stream's staging as a query over its records (folder ``records``): each staged impression (every copy),
    with each staged label of it within the longest window (``label_*`` columns), or one row with none."""
    impression = ", ".join(f"i.`{c}`" for c in staged_impression_columns(registry))
    seconds = int(registry.max_window.total_seconds())
    return (f"SELECT {impression}, l.label_type, l.event_time AS label_time, l.source_file AS label_file, "
            f"l.line AS label_line FROM delta.`{records}` i LEFT JOIN delta.`{records}` l "
            f"ON l.record = '{LABEL}' AND l.impression_id = i.impression_id AND l.event_time >= i.event_time "
            f"AND l.event_time <= i.event_time + INTERVAL {seconds} SECONDS WHERE i.record = '{IMPRESSION}'")
