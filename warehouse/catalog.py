"""The feature catalog in the metastore: its tables and views, and the registry sync.

    featurehouse catalog sync                      # registry files -> featurehouse_catalog.features
    featurehouse sql "SELECT * FROM featurehouse_catalog.unused_features"

Table schemas live in ``schemas/catalog.py``; per-ds statistics are computed by
``warehouse/stats.py``; usage rows are appended by the reader (``ingest/usage.py``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from schemas.catalog import CATALOG_DATABASE, CATALOG_TABLES, FEATURES, FEATURES_SCHEMA, catalog_table
from schemas.registry import DatasetRegistry, Feature
from warehouse.catalog_views import VIEWS
from warehouse.tables import create_delta_sql, create_if_missing, overwrite_where, retry_conflicts

#: The columns of ``features`` that say what a feature is (everything but ``updated_at``).
_CONTENT = tuple(f.name for f in FEATURES_SCHEMA if f.name != "updated_at")


def ensure_catalog_table(spark: SparkSession, name: str) -> str:
    """Create one catalog table (and the database) from its schema if missing, tolerating a concurrent creator."""
    table = catalog_table(name)
    schema, partition_columns = CATALOG_TABLES[name]

    columns = from_arrow_schema(schema, prefer_timestamp_ntz=False)
    create_if_missing(spark, table, lambda: spark.sql(create_delta_sql(table, columns, partitioned_by=partition_columns)))
    return table


def ensure_catalog(spark: SparkSession) -> None:
    """Create the catalog database, its Delta tables (if missing) and its views (replaced)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {CATALOG_DATABASE}")
    for name in CATALOG_TABLES:
        ensure_catalog_table(spark, name)
    for name, body in VIEWS.items():
        # CREATE OR REPLACE VIEW is a drop and a create in the metastore: a concurrent job's create can land in
        # between, and this one then fails as TABLE_OR_VIEW_ALREADY_EXISTS; once more replaces it (same body)
        statement = f"CREATE OR REPLACE VIEW {CATALOG_DATABASE}.{name} AS {body.strip()}"
        retry_conflicts(lambda statement=statement: spark.sql(statement), on=(AnalysisException,))


def feature_row(registry: DatasetRegistry, feature: Feature) -> dict[str, Any]:
    """What the catalog says about one registered feature (without ``updated_at``)."""
    return {
        "dataset": registry.dataset,
        "feature": feature.name,
        "kind": feature.kind.value,
        "dtype": feature.dtype.value,
        "default_value": None if feature.default is None else json.dumps(feature.default),
        "owner": feature.owner,
        "description": feature.description,
        "status": feature.status.value,
        "added_ds": feature.lifecycle.added_ds,
        "deprecated_ds": feature.lifecycle.deprecated_ds,
        "renamed_from": feature.renamed_from,
        "derived": feature.derived,
        "registry_file": registry.source,
    }


def catalog_features(spark: SparkSession, dataset: str) -> dict[str, dict[str, Any]]:
    """The catalog's rows of ``dataset`` by feature name (without ``updated_at``); empty if never synced."""
    if not spark.catalog.tableExists(catalog_table(FEATURES)):
        return {}
    rows = spark.table(catalog_table(FEATURES)).where(F.col("dataset") == dataset).select(*_CONTENT).collect()
    return {row["feature"]: row.asDict() for row in rows}


@dataclass(frozen=True)
class SyncResult:
    dataset: str
    added: tuple[str, ...]
    renamed: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]
    unchanged: int

    def format(self) -> str:
        groups = (("added", self.added), ("renamed", self.renamed), ("changed", self.changed), ("removed", self.removed))
        if not any(names for _label, names in groups):
            return f"catalog sync {self.dataset}: {self.unchanged} features, no change"
        parts = [f"{len(names)} {label}" for label, names in groups if names]
        lines = [f"catalog sync {self.dataset}: {', '.join(parts)}, {self.unchanged} unchanged"]
        for label, names in groups:
            if names:
                shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
                lines.append(f"  {label:<8} {shown}")
        return "\n".join(lines)


def sync_features(spark: SparkSession, registry: DatasetRegistry, *, now: dt.datetime | None = None) -> SyncResult:
    """Make ``features`` hold exactly the registry's features of its dataset; idempotent.

    Rows whose content is unchanged keep their ``updated_at``; when nothing
    changed, nothing is written (no new Delta version).
    """
    ensure_catalog(spark)
    now = now or dt.datetime.now(dt.UTC)
    table = catalog_table(FEATURES)
    existing = spark.table(table).where(F.col("dataset") == registry.dataset).collect()
    before: Mapping[str, dict[str, Any]] = {row["feature"]: row.asDict() for row in existing}
    wanted = {f.name: feature_row(registry, f) for f in registry.features}
    renames = {f.renamed_from: f.name for f in registry.features if f.renamed_from in before and f.name not in before}
    added = tuple(name for name in wanted if name not in before and name not in renames.values())
    renamed = tuple(f"{old} -> {new}" for old, new in renames.items())
    removed = tuple(sorted(name for name in before if name not in wanted and name not in renames))
    changed = tuple(
        name for name in wanted if name in before and any(before[name][c] != wanted[name][c] for c in _CONTENT)
    )
    result = SyncResult(
        registry.dataset, added, renamed, changed, removed, len(wanted) - len(added) - len(renamed) - len(changed)
    )
    if not (added or renamed or changed or removed):
        return result
    fresh = set(added) | set(changed) | set(renames.values())
    rows = [{**row, "updated_at": now if name in fresh else before[name]["updated_at"]} for name, row in wanted.items()]
    frame = spark.createDataFrame(rows, schema=from_arrow_schema(FEATURES_SCHEMA, prefer_timestamp_ntz=False))
    overwrite_where(spark, table, frame, F.col("dataset") == F.lit(registry.dataset))
    return result
