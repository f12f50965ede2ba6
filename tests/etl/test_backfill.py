"""Backfill of derived features into past partitions (real Spark, Delta, metastore)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest
import yaml
from delta.tables import DeltaTable

from etl import label_join
from etl.maintenance import backfill
from schemas.errors import RegistryError
from tests.conftest import close_partition, dataset_name, write_landing

pytestmark = pytest.mark.spark

DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
DERIVED = [
    {"name": "item_price_log", "kind": "dense", "dtype": "float32", "derived": "log1p(item_price)",
     "description": "log of the price", "owner": "t"},
    {"name": "user_topic_x_item", "kind": "sparse", "dtype": "int64",
     "derived": "transform(user_topic_ids, t -> xxhash64(t, item_id))",
     "description": "user topics crossed with the item", "owner": "t"},
]  # fmt: skip


def record(ds: str, i: int) -> dict:
    return {
        "impression_id": f"{ds}-{i}",
        "user_id": i,
        "item_id": 100 + i,
        "event_time": f"{ds}T0{i}:00:00.000Z",
        "dense": {"user_ctr_7d": 0.1 * i, **({"item_price": 2.0 * i} if i % 3 else {})},
        "sparse": {"user_topic_ids": list(range(i % 4))},
    }


@pytest.fixture
def joined(spark, request, tmp_path: Path, registry_dir: Path):
    """Three days written with the plain registry; returns (registry_dir, dataset, table)."""
    landing = tmp_path / "landing"
    dataset = dataset_name(request)
    for ds in DAYS:
        write_landing(landing, "impressions", ds, [record(ds, i) for i in range(6)])
        for k in range(4):
            close_partition(landing, "labels", (dt.date.fromisoformat(ds) + dt.timedelta(days=k)).isoformat())
        label_join.run(spark, label_join.LabelJoinConfig(
            dataset=dataset, ds=dt.date.fromisoformat(ds), home=tmp_path, landing=str(landing),
            registry_dir=registry_dir,
        ))  # fmt: skip
    return registry_dir, dataset, f"featurehouse.{dataset}"


def add_to_registry(registry_dir: Path, dataset: str, features: list[dict]) -> None:
    path = registry_dir / f"{dataset}.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["features"] += features
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def run_backfill(spark, registry_dir: Path, dataset: str, feature: str | tuple[str, ...],
                 tmp_path: Path) -> backfill.BackfillSummary:  # fmt: skip
    config = backfill.BackfillConfig(
        dataset=dataset, features=(feature,) if isinstance(feature, str) else feature, start=dt.date(2026, 10, 31),
        end=dt.date(2026, 11, 3), home=tmp_path, registry_dir=registry_dir,
    )  # fmt: skip
    return backfill.run(spark, config)


def version(spark, table: str) -> int:
    return DeltaTable.forName(spark, table).history(1).first()["version"]


def test_backfill_gives_the_expression_value_leaves_other_columns_and_is_idempotent(spark, joined, tmp_path):
    registry_dir, dataset, table = joined
    before = sorted(spark.table(table).collect())
    add_to_registry(registry_dir, dataset, DERIVED)

    first = run_backfill(spark, registry_dir, dataset, "item_price_log", tmp_path)
    assert [p.ds for p in first.partitions] == DAYS  # 2026-10-31 is in the range but not in the table
    assert all(p.version is not None and p.changed == 4 and p.rows == 6 for p in first.partitions)
    second = run_backfill(spark, registry_dir, dataset, "user_topic_x_item", tmp_path)
    assert [p.changed for p in second.partitions] == [6, 6, 6]  # empty topic lists cross to [], not null

    after = spark.table(table).collect()
    others = [c for c in spark.table(table).columns if c not in ("item_price_log", "user_topic_x_item")]
    assert sorted(tuple(r[c] for c in others) for r in after) == [tuple(r[c] for c in others) for r in before]
    rows = 0
    for r in after:
        expected = None if r.item_price is None else math.log1p(r.item_price)
        assert r.item_price_log == (None if expected is None else pytest.approx(expected, rel=1e-6))
        expected_cross = spark.sql(
            "SELECT transform(array_repeat(0, 0), t -> 0L)" if not r.user_topic_ids else
            f"SELECT transform(array({', '.join(f'{t}L' for t in r.user_topic_ids)}), t -> xxhash64(t, {r.item_id}L))"
        ).first()[0]  # fmt: skip
        assert r.user_topic_x_item == expected_cross
        rows += 1
    assert rows == 18

    at = version(spark, table)
    again = run_backfill(spark, registry_dir, dataset, "item_price_log", tmp_path)
    assert [(p.version, p.changed) for p in again.partitions] == [(None, 0)] * 3
    assert version(spark, table) == at, "a second backfill wrote a commit"
    assert "3 already filled, 1 not in the table (2026-10-31)" in again.format()


def test_backfill_refuses_a_feature_that_is_not_derived(spark, joined, tmp_path):
    registry_dir, dataset, _table = joined
    with pytest.raises(RegistryError, match=r"'item_price' is not derived .* backfill fills derived features only"):
        run_backfill(spark, registry_dir, dataset, "item_price", tmp_path)
    add_to_registry(registry_dir, dataset, [{**DERIVED[0], "derived": "log1p(label_click)"}])
    with pytest.raises(RegistryError, match=r"derived expression of feature 'item_price_log' \(log1p\(label_click\)\)"
                                            r".*never labels"):
        run_backfill(spark, registry_dir, dataset, "item_price_log", tmp_path)


def test_several_features_are_filled_in_one_commit_per_partition(spark, joined, tmp_path):
    registry_dir, dataset, table = joined
    before = {r.impression_id: r for r in spark.table(table).collect()}
    add_to_registry(registry_dir, dataset, DERIVED)

    both = run_backfill(spark, registry_dir, dataset, ("item_price_log", "user_topic_x_item"), tmp_path)
    versions = [p.version for p in both.partitions]
    assert [p.ds for p in both.partitions] == DAYS and [p.changed for p in both.partitions] == [6, 6, 6]
    assert versions == list(range(versions[0], versions[0] + 3)) and version(spark, table) == versions[-1]
    assert all(p.stats_version is not None for p in both.partitions)
    after = spark.table(table).collect()
    assert len(after) == 18
    for r in after:
        old = before[r.impression_id]
        assert r.item_price_log == (None if old.item_price is None else pytest.approx(math.log1p(old.item_price), rel=1e-6))
        assert len(r.user_topic_x_item) == len(old.user_topic_ids or [])
    assert "backfill featurehouse.%s.item_price_log = log1p(item_price)" % dataset in both.format()

    again = run_backfill(spark, registry_dir, dataset, ("user_topic_x_item", "item_price_log"), tmp_path)
    assert [(p.version, p.changed) for p in again.partitions] == [(None, 0)] * 3 and version(spark, table) == versions[-1]


@pytest.mark.parametrize("features, message", [((), "no feature to backfill"),
                                               (("a", "b", "a"), "names a feature twice")])  # fmt: skip
def test_a_backfill_of_no_feature_or_a_repeated_one_is_refused(tmp_path, features, message):
    from schemas.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        backfill.BackfillConfig(dataset="ads", features=features, start=dt.date(2026, 11, 1), end=dt.date(2026, 11, 2),
                                home=tmp_path)  # fmt: skip
