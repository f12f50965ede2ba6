"""Feature tables: Delta tables in the metastore, one per dataset, PARTITIONED BY (ds).

Created from the registry (never from a restated schema), written one ds at a
time with an atomic replace of that ds only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from schemas.errors import TableError
from schemas.names import validate_name
from schemas.registry import PARTITION_COLUMN, DatasetRegistry
from schemas.spark import table_schema

DATABASE = "featurehouse"


def table_name(dataset: str, *, database: str = DATABASE) -> str:
    """The metastore name of a dataset's feature table: ``featurehouse.<dataset>``."""
    return f"{validate_name('database', database)}.{validate_name('dataset', dataset)}"


def ensure_feature_table(spark: SparkSession, registry: DatasetRegistry, *, database: str = DATABASE) -> str:
    """Create the dataset's Delta table if missing; check an existing one against the registry.

    Returns the table name. A table whose columns differ from the registry is a
    :class:`TableError` naming the differences.
    """
    name = table_name(registry.dataset, database=database)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    expected = table_schema(registry)
    (
        DeltaTable.createIfNotExists(spark)
        .tableName(name)
        .addColumns(expected)
        .partitionedBy(PARTITION_COLUMN)
        .comment(registry.description or f"feature table of dataset {registry.dataset}")
        .execute()
    )
    actual = {f.name: f.dataType for f in spark.table(name).schema.fields}
    wanted = {f.name: f.dataType for f in expected.fields}
    missing = sorted(wanted.keys() - actual.keys())
    extra = sorted(actual.keys() - wanted.keys())
    changed = sorted(c for c in wanted.keys() & actual.keys() if wanted[c] != actual[c])
    if missing or extra or changed:
        parts = []
        if missing:
            parts.append(f"registry columns missing from the table: {', '.join(missing)}")
        if extra:
            parts.append(f"table columns not in the registry: {', '.join(extra)}")
        if changed:
            parts.append(
                "columns whose type differs: "
                + ", ".join(f"{c} (table {actual[c].simpleString()}, registry {wanted[c].simpleString()})" for c in changed)
            )
        raise TableError(
            f"table {name} does not match registry {registry.source}: {'; '.join(parts)}. "
            "Schema evolution is not supported yet: revert the registry change, or drop the table and rebuild it"
        )
    return name


@dataclass(frozen=True)
class CommitMetrics:
    """What one Delta commit wrote, read from the table's history."""

    version: int
    rows: int
    bytes: int
    files: int
    removed_files: int


def replace_partition(spark: SparkSession, table: str, frame: DataFrame, ds: str) -> CommitMetrics:
    """Atomically replace partition ``ds`` of ``table`` with ``frame`` (one Delta commit).

    Every row of ``frame`` must have ``ds == ds``; Delta refuses the commit
    otherwise, so no other partition can be touched.
    """
    run_id = f"featurehouse:{uuid.uuid4()}"
    columns = [f.name for f in spark.table(table).schema.fields]
    frame.select(*columns).writeTo(table).option("userMetadata", run_id).overwrite(F.col(PARTITION_COLUMN) == F.lit(ds))
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
