"""Feature tables: Delta tables in the metastore, one per dataset, PARTITIONED BY (ds).

Created and evolved from the registry by ``warehouse/evolution.py`` (never from a
restated schema), written one ds at a time with an atomic replace of that ds only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from schemas.errors import TableError
from schemas.names import validate_name
from schemas.registry import PARTITION_COLUMN

DATABASE = "featurehouse"


def table_name(dataset: str, *, database: str = DATABASE) -> str:
    """The metastore name of a dataset's feature table: ``featurehouse.<dataset>``."""
    return f"{validate_name('database', database)}.{validate_name('dataset', dataset)}"


@dataclass(frozen=True)
class CommitMetrics:
    """What one Delta commit wrote, read from the table's history."""

    version: int
    rows: int
    bytes: int
    files: int
    removed_files: int


def overwrite_where(spark: SparkSession, table: str, frame: DataFrame, condition: Column) -> CommitMetrics:
    """Replace the rows of ``table`` matching ``condition`` with ``frame``, in one Delta commit.

    Delta refuses the commit if a row of ``frame`` does not match ``condition``, so
    nothing else can be touched. The commit is found in the history by a per-call
    ``userMetadata`` tag, so concurrent writers cannot be mistaken for it.
    """
    run_id = f"featurehouse:{uuid.uuid4()}"
    columns = [f.name for f in spark.table(table).schema.fields]
    frame.select(*columns).writeTo(table).option("userMetadata", run_id).overwrite(condition)
    history = DeltaTable.forName(spark, table).history(20).where(F.col("userMetadata") == run_id).collect()
    if len(history) != 1:
        raise TableError(f"could not find the commit of run {run_id} in the history of {table}")
    metrics = history[0]["operationMetrics"] or {}
    return CommitMetrics(
        version=int(history[0]["version"]),
        rows=int(metrics.get("numOutputRows", 0)),
        bytes=int(metrics.get("numOutputBytes", 0)),
        files=int(metrics.get("numFiles", 0)),
        removed_files=int(metrics.get("numRemovedFiles", 0)),
    )


def replace_partition(spark: SparkSession, table: str, frame: DataFrame, ds: str) -> CommitMetrics:
    """Atomically replace partition ``ds`` of ``table`` with ``frame`` (one Delta commit)."""
    return overwrite_where(spark, table, frame, F.col(PARTITION_COLUMN) == F.lit(ds))
