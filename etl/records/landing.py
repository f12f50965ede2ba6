"""The landing zone: where impression and label logs arrive, as JSON lines by ds/hour.

Layout (written by the serving loggers, or by ``featurehouse generate``)::

    <landing>/impressions/ds=YYYY-MM-DD/hour=HH/*.jsonl
    <landing>/labels/ds=YYYY-MM-DD/hour=HH/*.jsonl
    <landing>/{impressions,labels}/ds=YYYY-MM-DD/_SUCCESS   <- the ds is complete

A ds partition is *closed* once its ``_SUCCESS`` marker exists. The layout itself is
``schemas/landing_layout.py`` (no Spark); here a local folder is listed by the OS and other
locations through Hadoop's FileSystem (in a classic session), so the landing zone may be a local
folder or object storage.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from schemas.errors import ConfigError
from schemas.landing_layout import SUCCESS_MARKER, Landing, RecordKind, label_days
from schemas.spark import (
    CORRUPT_RECORD_COLUMN,
    impression_event_schema,
    label_event_schema,
)
from schemas.paths import local_path
from warehouse.session import is_connect

__all__ = ["SUCCESS_MARKER", "Landing", "RecordKind", "label_days"]  # the layout, re-exported for the Spark jobs


def _filesystem_path(spark: SparkSession, path: str):  # noqa: ANN202 - py4j objects
    """Hadoop's FileSystem for a location that is not a local path (``s3a://``, ``hdfs://``), through the JVM of a
    classic session; a session on an engine has no JVM here (refused, naming the way that works)."""
    if is_connect(spark):
        raise ConfigError(f"{path}: a landing zone that is not a local folder is read through an engine only by "
                          "Spark itself, not listed by this command yet; pass --engine off")  # fmt: skip
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists: a local path by the OS, another location on whatever filesystem its scheme names."""
    if (local := local_path(path)) is not None:
        return local.exists()
    fs, hadoop_path = _filesystem_path(spark, path)
    return bool(fs.exists(hadoop_path))


def is_closed(spark: SparkSession, partition: str) -> bool:
    """Whether a landing partition holds its ``_SUCCESS`` marker."""
    return path_exists(spark, f"{partition}/{SUCCESS_MARKER}")


#: The line as it was in the file: kept for the quarantine (null once a record is known good).
RAW_COLUMN = "_raw"
#: Spark's monotonically increasing id of the line: consecutive within a file split, so it numbers the lines.
ROW_ID_COLUMN = "_row_id"


def _read_json(spark: SparkSession, paths: Sequence[str], schema: StructType) -> DataFrame:
    """Read JSON lines permissively, one row per line: a line that does not parse keeps its text in ``_corrupt_record``.

    The files are read as text and each line parsed with ``from_json``, so that every line, blank
    ones included, is a row that can be traced back to its place: ``source_file``, ``split_start``
    (the byte offset where Spark's split of the file begins: 0 unless a file larger than
    ``spark.sql.files.maxPartitionBytes`` was split) and ``_row_id`` (see :func:`line_numbers`).
    ``_raw`` is the line itself and ``ds`` the partition folder's date. Files are found recursively
    under each ds folder (hour=HH/...); ``_SUCCESS`` and other ``_``/``.`` files are skipped by Spark.
    """
    lines = spark.read.option("recursiveFileLookup", "true").text(list(paths))
    located = lines.select(
        "value",
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_block_start").alias("split_start"),
        F.monotonically_increasing_id().alias(ROW_ID_COLUMN),
    )
    return parse_json_lines(located, schema, folder_ds())


def folder_ds() -> Column:
    """The ds of a landing file: its ``ds=YYYY-MM-DD`` folder."""
    return F.regexp_extract("source_file", r"/ds=(\d{4}-\d{2}-\d{2})/", 1)


def parse_json_lines(lines: DataFrame, schema: StructType, ds: Column) -> DataFrame:
    """Parse ``lines`` (``value``: one JSON line; ``source_file``, ``split_start``, ``_row_id`` and any columns
    ``ds`` reads) permissively with ``schema``: a line that does not parse keeps its text in ``_corrupt_record``.

    The one parse of the batch and the streaming jobs, whatever the lines came from (landing files,
    Kafka records). Returns the record's fields, ``_raw`` (the line), the location columns, any
    ``line`` column of ``lines``, and ``ds`` (``ds`` evaluated over the parsed record, e.g. its folder's date).
    """
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_RECORD_COLUMN}
    extra = [c for c in lines.columns if c not in ("value", "source_file", "split_start", ROW_ID_COLUMN)]
    record = lines.select(
        F.from_json("value", schema, options).alias("_record"),
        F.col("value").alias(RAW_COLUMN),
        "source_file",
        "split_start",
        ROW_ID_COLUMN,
        *extra,
    ).select("_record.*", RAW_COLUMN, "source_file", "split_start", ROW_ID_COLUMN, *extra)
    return record.withColumn("ds", ds).drop(*[c for c in extra if c != "line"])


def line_numbers(rows: DataFrame, every_row: DataFrame) -> DataFrame:
    """``rows`` (some rows of a :func:`_read_json` frame) with ``line``: 1-based, counted from ``split_start``.

    Spark numbers the rows of a task consecutively, and a task reads a file split's lines in
    order, so a line's number is its ``_row_id`` minus the split's first ``_row_id``, plus one.
    ``every_row`` is the frame ``rows`` was taken from (persisted, so both see the same ids).
    """
    firsts = every_row.groupBy("source_file", "split_start").agg(F.min(ROW_ID_COLUMN).alias("_first"))
    return (
        rows.join(F.broadcast(firsts), ["source_file", "split_start"])
        .withColumn("line", F.col(ROW_ID_COLUMN) - F.col("_first") + 1)
        .drop("_first")
    )


def _local_files(folder: Path) -> Iterator[Path]:
    return (p for p in folder.rglob("*") if p.is_file())


def bytes_under(spark: SparkSession, paths: Sequence[str]) -> int:
    """The bytes of the files under ``paths`` (recursively; a missing path counts 0): one listing call per path."""
    total = 0
    for path in paths:
        if (local := local_path(path)) is not None:
            total += sum(p.stat().st_size for p in _local_files(local)) if local.is_dir() else \
                (local.stat().st_size if local.exists() else 0)  # fmt: skip
            continue
        fs, hadoop_path = _filesystem_path(spark, path)
        if fs.exists(hadoop_path):
            total += int(fs.getContentSummary(hadoop_path).getLength())
    return total


def _is_data_file(name: str) -> bool:
    return not name.startswith(("_", "."))


def empty_files(spark: SparkSession, paths: Sequence[str]) -> list[str]:
    """The empty data files under ``paths`` (recursively): a logger that died before writing its first line."""
    found = []
    for path in paths:
        if (local := local_path(path)) is not None:
            if local.is_dir():
                found += [f"file:{p}" for p in _local_files(local) if p.stat().st_size == 0 and _is_data_file(p.name)]
            continue
        fs, hadoop_path = _filesystem_path(spark, path)
        if not fs.exists(hadoop_path):
            continue
        files = fs.listFiles(hadoop_path, True)
        while files.hasNext():
            status = files.next()
            name = status.getPath().getName()
            if status.getLen() == 0 and _is_data_file(name):
                found.append(str(status.getPath()))
    return sorted(found)


def read_impressions(spark: SparkSession, landing: Landing, days: Sequence[dt.date], schema: StructType | None = None
                     ) -> DataFrame:  # fmt: skip
    """Impression records of ``days`` parsed with ``schema`` (default :func:`schemas.spark.impression_event_schema`;
    the label join passes :func:`schemas.spark.impression_record_schema`), plus the columns of :func:`_read_json`."""
    paths = [landing.partition(RecordKind.IMPRESSIONS, d) for d in days]
    return _read_json(spark, paths, schema or impression_event_schema())


def empty_labels(spark: SparkSession) -> DataFrame:
    """No labels, with the columns :func:`read_labels` gives (for a join whose label partitions are all missing)."""
    schema = (
        label_event_schema()
        .add(RAW_COLUMN, "string")
        .add("source_file", "string")
        .add("split_start", "long")
        .add(ROW_ID_COLUMN, "long")
        .add("ds", "string")
    )
    return spark.createDataFrame([], schema)


def read_labels(spark: SparkSession, landing: Landing, days: Sequence[dt.date]) -> DataFrame:
    """Label records of ``days``: :func:`schemas.spark.label_event_schema` plus the columns of :func:`_read_json`."""
    paths = [landing.partition(RecordKind.LABELS, d) for d in days]
    return _read_json(spark, paths, label_event_schema())
