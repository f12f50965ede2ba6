"""The catalog's registry sync and its stale_features view, on real Delta tables in the metastore."""

from __future__ import annotations

import datetime as dt

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from schemas.catalog import FEATURE_STATS_SCHEMA
from schemas.registry import parse_registry
from tests.conftest import dataset_name
from warehouse.catalog import ensure_catalog, sync_features
from warehouse.tables import overwrite_where

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def registry(dataset: str, *, owner_of_a: str = "o", deprecated: bool = False):
    features = [
        {"name": "a", "kind": "dense", "dtype": "float32", "description": "d", "owner": owner_of_a},
        {"name": "b", "kind": "sparse", "dtype": "int64", "description": "d", "owner": "o"},
        {"name": "gone", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o",
         "lifecycle": {"status": "deprecated", "deprecated_ds": "2026-11-02"} if deprecated else {"status": "active"}},
        {"name": "empty", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"},
        {"name": "unmeasured", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"},
    ]  # fmt: skip
    raw = {"dataset": dataset, "labels": [{"name": "click", "window": "1h"}], "features": features}
    return parse_registry(raw, source=f"{dataset}.yaml")


def versions(spark) -> int:
    return DeltaTable.forName(spark, "featurehouse_catalog.features").history(1).first()["version"]


def test_sync_is_idempotent_and_touches_only_changed_rows(spark, request):
    dataset = dataset_name(request)
    first = sync_features(spark, registry(dataset), now=T0)
    assert (len(first.added), first.unchanged) == (5, 0)
    at = versions(spark)
    again = sync_features(spark, registry(dataset), now=T0 + dt.timedelta(days=1))
    assert again.format() == f"catalog sync {dataset}: 5 features, no change"
    assert versions(spark) == at, "a sync without changes wrote a commit"

    later = T0 + dt.timedelta(days=2)
    changed = sync_features(spark, registry(dataset, owner_of_a="ranking", deprecated=True), now=later)
    assert (changed.changed, changed.unchanged) == (("a", "gone"), 3)
    rows = {r.feature: r for r in spark.table("featurehouse_catalog.features").where(f"dataset = '{dataset}'").collect()}
    assert {name: r.updated_at.astimezone(dt.UTC) for name, r in rows.items()} == {
        "a": later, "b": T0, "gone": later, "empty": T0, "unmeasured": T0,
    }
    assert (rows["a"].owner, rows["gone"].status, rows["gone"].deprecated_ds) == (
        "ranking", "deprecated", dt.date(2026, 11, 2)
    )


def test_stale_features_are_active_ones_missing_or_near_empty_in_the_latest_seven_partitions(spark, request):
    dataset = dataset_name(request)
    ensure_catalog(spark)
    sync_features(spark, registry(dataset, deprecated=True), now=T0)
    days = [(dt.date(2026, 10, 24) + dt.timedelta(days=i)).isoformat() for i in range(9)]  # 9 ds; 7 are recent
    coverage = {"a": 0.9, "b": 0.8, "gone": 0.0, "empty": 0.005}
    rows = []
    for k, ds in enumerate(days):
        for feature, value in coverage.items():
            if feature == "empty" and k < 2:
                value = 0.9  # filled only in the two oldest partitions, which are not recent
            rows.append({name: None for name in FEATURE_STATS_SCHEMA.names} | {
                "dataset": dataset, "feature": feature, "kind": "dense", "table_version": 1, "rows": 1000,
                "non_null": int(value * 1000), "coverage": value, "bytes_on_disk": 10, "computed_at": T0, "ds": ds,
            })  # fmt: skip
    frame = spark.createDataFrame(rows, from_arrow_schema(FEATURE_STATS_SCHEMA, prefer_timestamp_ntz=False))
    overwrite_where(spark, "featurehouse_catalog.feature_stats", frame, F.col("dataset") == dataset)

    stale = spark.sql(
        "SELECT feature, reason, since_ds, until_ds, recent_partitions, partitions_present, max_coverage, "
        f"last_ds_with_values FROM featurehouse_catalog.stale_features WHERE dataset = '{dataset}' ORDER BY feature"
    ).collect()
    assert [tuple(r) for r in stale] == [
        ("empty", "near-empty", days[2], days[-1], 7, 7, 0.005, None),
        ("unmeasured", "missing", days[2], days[-1], 7, 0, None, None),
    ]
