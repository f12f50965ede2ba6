"""The streaming label join's plan: both sources parsed as the batch job parses them, as one stream of records.

Lines come from the landing folders (a file stream) or from Kafka; after :func:`read_files` or
:func:`read_kafka` there is one code path. Records are parsed (:func:`etl.records.landing.parse_json_lines`),
flattened and judged (:func:`etl.records.flatten.flatten_impressions`, :func:`etl.records.quarantine.label_valid`)
by the batch job's own functions, with each record's ds its own (a stream spans days).

The plan has no join and no stateful operator: the query's output, one micro-batch at a time, is
the union of every impression record and every label record, each with its ``_kind``:
``impression`` and ``label`` (valid records), ``bad_impression`` and ``bad_label`` (records to
quarantine, with the batch job's reasons). :class:`etl.stream.writer.BatchWriter` stages the
valid ones (an impression with its features, once, on arrival; a label as it is) and judges
which arrived too late; impressions meet their labels in the staging view
(:func:`etl.stream.tables.staging_sql`) and when a closed day is published (:mod:`etl.stream.publish`).
Each source is scanned once per micro-batch.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from etl.records.flatten import flatten_impressions
from etl.records.landing import ROW_ID_COLUMN, folder_ds, parse_json_lines
from etl.records.quarantine import (
    VALID_COLUMN,
    label_valid,
)
from schemas.registry import DatasetRegistry
from schemas.spark import impression_record_schema, label_event_schema

KIND = "_kind"
#: A staging row's label: its type, time and where it came from (file or Kafka partition, line or offset).
LABEL_COLUMNS = ["label_type", "label_time", "label_file", "label_line"]
#: Any line break Hadoop's text reader ends a line at (it reads \n, \r and \r\n).
LINE_BREAK = r"\r\n|\r|\n"


def read_files(spark: SparkSession, root: str, *, max_files: int | None) -> DataFrame:
    """New landing files under ``root`` (one stream's folder), one row per line with its 1-based ``line``.

    Each file is read whole and cut into lines, so that every line is numbered as the batch job
    numbers it (a stream has no row ids to count lines by). An empty file is one row whose
    ``value`` is null (quarantined as ``empty_file``). ``max_files``: files per micro-batch.
    """
    reader = spark.readStream.format("text").option("wholetext", "true")
    if max_files:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    files = reader.load(root)
    text = F.regexp_replace("value", rf"({LINE_BREAK})\z", "")  # a final line break ends the last line
    lines = F.when(F.length("value") > 0, F.split(text, LINE_BREAK)).otherwise(F.array(F.lit(None).cast("string")))
    return files.select(
        F.posexplode(lines).alias("_pos", "value"),
        F.col("_metadata.file_path").alias("source_file"),
    ).withColumn("_number", (F.col("_pos") + 1).cast("long")).select(
        "value",
        "source_file",
        F.lit(0).cast("long").alias("split_start"),
        F.col("_number").alias(ROW_ID_COLUMN),
        F.when(F.col("value").isNotNull(), F.col("_number")).alias("line"),
    )


def read_kafka(spark: SparkSession, bootstrap: str, topic: str, *, max_offsets: int | None) -> DataFrame:
    """Records of ``topic`` as lines: ``source_file`` is ``kafka:<topic>/<partition>``, ``line`` the offset."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest"))  # fmt: skip
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load().select(
        F.col("value").cast("string").alias("value"),
        F.concat(F.lit("kafka:"), F.col("topic"), F.lit("/"), F.col("partition").cast("string")).alias("source_file"),
        F.lit(0).cast("long").alias("split_start"),
        F.col("offset").alias(ROW_ID_COLUMN),
        F.col("offset").alias("line"),
        F.date_format("timestamp", "yyyy-MM-dd").alias("_arrival_ds"),
    )


def record_ds(lines: DataFrame) -> Column:
    """A record's ds: its landing folder's date; from Kafka, its event time's date (else the day it arrived)."""
    if "_arrival_ds" in lines.columns:
        return F.coalesce(F.date_format("event_time", "yyyy-MM-dd"), F.col("_arrival_ds"))
    return folder_ds()


def window_interval(registry: DatasetRegistry) -> Column:
    """The longest label window as a SQL interval."""
    return F.expr(f"INTERVAL {int(registry.max_window.total_seconds())} SECONDS")


def plan(registry: DatasetRegistry, impression_lines: DataFrame, label_lines: DataFrame) -> DataFrame:
    """The streaming query's output: every record of both sources, judged (see the module docstring)."""
    records = parse_json_lines(impression_lines, impression_record_schema(registry), record_ds(impression_lines))
    flat = flatten_impressions(records, registry, None)
    labels = parse_json_lines(label_lines, label_event_schema(), record_ds(label_lines))
    labels = labels.withColumn(VALID_COLUMN, label_valid([label.name for label in registry.labels]))
    valid = F.col(VALID_COLUMN)
    impressions = flat.select(*[c for c in flat.columns if c != VALID_COLUMN],
                              F.when(valid, "impression").otherwise("bad_impression").alias(KIND))  # fmt: skip
    labels = labels.select("*", F.when(valid, "label").otherwise("bad_label").alias(KIND)).drop(VALID_COLUMN)
    return impressions.unionByName(labels, allowMissingColumns=True)


def staged_impression_columns(registry: DatasetRegistry) -> list[str]:
    """An impression's columns in the staging table: keys, stored features, where it came from, ds."""
    return ["impression_id", "user_id", "item_id", "event_time", *[f.name for f in registry.stored_features],
            "source_file", "split_start", "line", "ds"]  # fmt: skip


def staging_columns(registry: DatasetRegistry) -> list[str]:
    """The columns of the staging view (:func:`etl.stream.tables.staging_sql`): an impression's and its label's."""
    return [*staged_impression_columns(registry), *LABEL_COLUMNS]


def record_columns(registry: DatasetRegistry) -> list[str]:
    """The staged records' columns: ``record`` (impression or label), an impression's columns (a label's
    ``event_time``, ``source_file``, ``line`` and ``ds`` are its own; its features are null), ``label_type``."""
    return ["record", *staged_impression_columns(registry), "label_type"]
