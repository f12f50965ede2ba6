"""The landing zone: where impression and label logs arrive, as JSON lines by ds/hour.

Layout (written by the serving loggers, or by ``featurehouse generate``)::

    <landing>/impressions/ds=YYYY-MM-DD/hour=HH/*.jsonl
    <landing>/labels/ds=YYYY-MM-DD/hour=HH/*.jsonl
    <landing>/{impressions,labels}/ds=YYYY-MM-DD/_SUCCESS   <- the ds is complete

A ds partition is *closed* once its ``_SUCCESS`` marker exists. Paths go through
Hadoop's FileSystem, so the landing zone may be a local folder or object storage.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from schemas.names import format_ds
from schemas.spark import CORRUPT_RECORD_COLUMN, impression_event_schema, label_event_schema

SUCCESS_MARKER = "_SUCCESS"


class Stream(StrEnum):
    IMPRESSIONS = "impressions"
    LABELS = "labels"


@dataclass(frozen=True)
class Landing:
    """The landing zone rooted at ``root`` (a local path or a Hadoop URI)."""

    root: str

    def partition(self, stream: Stream, day: dt.date) -> str:
        return f"{self.root.rstrip('/')}/{stream.value}/ds={format_ds(day)}"


def _filesystem_path(spark: SparkSession, path: str):  # noqa: ANN202 - py4j objects
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists, on whatever filesystem its scheme names."""
    fs, hadoop_path = _filesystem_path(spark, path)
    return bool(fs.exists(hadoop_path))


def is_closed(spark: SparkSession, partition: str) -> bool:
    """Whether a landing partition holds its ``_SUCCESS`` marker."""
    return path_exists(spark, f"{partition}/{SUCCESS_MARKER}")


def label_days(day: dt.date, max_window: dt.timedelta) -> list[dt.date]:
    """The label partitions that can hold labels of ``day``'s impressions.

    From ``day`` through the day on which the longest window of the day's last
    impression (just before midnight) closes.

    >>> label_days(dt.date(2026, 11, 1), dt.timedelta(hours=1))
    [datetime.date(2026, 11, 1), datetime.date(2026, 11, 2)]
    """
    midnight_after = dt.datetime.combine(day + dt.timedelta(days=1), dt.time())
    last = (midnight_after + max_window - dt.timedelta(microseconds=1)).date()
    return [day + dt.timedelta(days=i) for i in range((last - day).days + 1)]


def _read_json(spark: SparkSession, paths: Sequence[str], schema: StructType) -> DataFrame:
    """Read JSON lines permissively: a line that does not parse keeps its text in ``_corrupt_record``.

    Adds ``source_file`` (from Spark's file metadata) and ``ds`` (from the partition folder in that path).
    Files are found recursively under each ds folder (hour=HH/...); ``_SUCCESS`` is skipped by Spark.
    """
    return (
        spark.read.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_RECORD_COLUMN)
        .option("recursiveFileLookup", "true")
        .json(list(paths))
        .withColumn("source_file", F.col("_metadata.file_path"))
        .withColumn("ds", F.regexp_extract("source_file", r"/ds=(\d{4}-\d{2}-\d{2})/", 1))
    )


def read_impressions(spark: SparkSession, landing: Landing, days: Sequence[dt.date]) -> DataFrame:
    """Impression records of ``days`` (schema: :func:`schemas.spark.impression_event_schema` + ds, source_file)."""
    paths = [landing.partition(Stream.IMPRESSIONS, d) for d in days]
    return _read_json(spark, paths, impression_event_schema())


def empty_labels(spark: SparkSession) -> DataFrame:
    """No labels, with the columns :func:`read_labels` gives (for a join whose label partitions are all missing)."""
    schema = label_event_schema().add("source_file", "string").add("ds", "string")
    return spark.createDataFrame([], schema)


def read_labels(spark: SparkSession, landing: Landing, days: Sequence[dt.date]) -> DataFrame:
    """Label records of ``days`` (schema: :func:`schemas.spark.label_event_schema` + ds, source_file)."""
    paths = [landing.partition(Stream.LABELS, d) for d in days]
    return _read_json(spark, paths, label_event_schema())
