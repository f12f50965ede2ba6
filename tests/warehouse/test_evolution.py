"""Schema evolution from the registry: adds, renames, drops and deprecations on real Delta tables.

Each test writes days through the real label join, edits the registry file the way a
user would, and checks the table's data and its data files.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
import yaml

from etl import label_join
from schemas.errors import RegistryError, TableError
from schemas.registry import load_dataset
from tests.conftest import close_partition, dataset_name, write_landing
from warehouse import evolution
from warehouse.evolution import Action

pytestmark = pytest.mark.spark

DAYS = [f"2026-11-0{d}" for d in range(1, 6)]


def impressions(ds: str, n: int = 4) -> list[dict]:
    """``n`` impressions of ``ds``; every record also logs ``item_ctr_7d`` (known to later registries)."""
    return [
        {
            "impression_id": f"{ds}-{i}",
            "user_id": i,
            "item_id": 100 + i,
            "event_time": f"{ds}T10:0{i}:00.000Z",
            "dense": {"user_ctr_7d": 0.1 * i, "item_price": 10.0 + i, "item_ctr_7d": 0.5 + i},
            "sparse": {"user_topic_ids": [i, i + 1]},
            "weighted_sparse": {"user_topic_affinity": [{"id": i, "weight": 0.5}]},
        }
        for i in range(n)
    ]


@pytest.fixture
def world(spark, request, tmp_path: Path, registry_dir: Path):
    """A landing zone with five closed days of impressions, and a way to label-join a day."""
    landing = tmp_path / "landing"
    for ds in DAYS:
        write_landing(landing, "impressions", ds, impressions(ds))
        for k in range(4):
            close_partition(landing, "labels", (dt.date.fromisoformat(ds) + dt.timedelta(days=k)).isoformat())
    dataset = dataset_name(request)
    path = registry_dir / f"{dataset}.yaml"

    class World:
        table = f"featurehouse.{dataset}"
        registry_path = path

        @staticmethod
        def join(ds: str) -> label_join.LabelJoinSummary:
            config = label_join.LabelJoinConfig(
                dataset=dataset, ds=dt.date.fromisoformat(ds), home=tmp_path, landing=str(landing),
                registry_dir=registry_dir,
            )  # fmt: skip
            return label_join.run(spark, config)

        @staticmethod
        def edit(change) -> None:
            raw = yaml.safe_load(path.read_text())
            change(raw)
            path.write_text(yaml.safe_dump(raw, sort_keys=False))

        @staticmethod
        def registry():
            return load_dataset(dataset, registry_dir)

    return World


def feature(raw: dict, name: str) -> dict:
    return next(f for f in raw["features"] if f["name"] == name)


def data_files(table_dir: Path) -> dict[str, int]:
    """Every Parquet data file under a table folder, with its size (the Delta log excluded)."""
    return {
        str(p.relative_to(table_dir)): p.stat().st_size
        for p in table_dir.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def table_dir(spark, table: str) -> Path:
    location = spark.sql(f"DESCRIBE DETAIL {table}").first()["location"]
    return Path(location.removeprefix("file:"))


def files_of(spark, table: str, ds: str) -> dict[str, int]:
    paths = spark.table(table).where(f"ds = '{ds}'").inputFiles()
    return {p: os.path.getsize(p.removeprefix("file:")) for p in paths}


def test_a_feature_added_on_day_3_is_null_before_and_filled_after_without_touching_old_files(spark, world):
    for ds in DAYS[:2]:
        world.join(ds)
    before = {ds: files_of(spark, world.table, ds) for ds in DAYS[:2]}
    rows_before = {ds: sorted(spark.table(world.table).where(f"ds = '{ds}'").collect()) for ds in DAYS[:2]}

    world.edit(lambda raw: raw["features"].append({
        "name": "item_ctr_7d", "kind": "dense", "dtype": "float32", "description": "item ctr", "owner": "t",
        "lifecycle": {"status": "active", "added_ds": DAYS[2]},
    }))  # fmt: skip
    assert [(c.action, c.feature) for c in evolution.make_plan(spark, world.registry()).changes] == [
        (Action.ADD_COLUMN, "item_ctr_7d"), (Action.REGISTER, None),
    ]
    for ds in DAYS[2:]:
        world.join(ds)

    values = {
        (r.ds, r.impression_id): r.item_ctr_7d
        for r in spark.table(world.table).select("ds", "impression_id", "item_ctr_7d").collect()
    }
    assert len(values) == 5 * 4
    for (ds, impression_id), value in values.items():
        i = int(impression_id.rsplit("-", 1)[1])
        assert value == (None if ds in DAYS[:2] else pytest.approx(0.5 + i)), (ds, impression_id)
    for ds in DAYS[:2]:
        assert files_of(spark, world.table, ds) == before[ds], f"data files of {ds} changed"
        old_columns = [c for c in spark.table(world.table).columns if c != "item_ctr_7d"]
        now = sorted(spark.table(world.table).where(f"ds = '{ds}'").select(*old_columns).collect())
        assert now == rows_before[ds]


def test_rename_and_drop_rewrite_no_data_file_and_reads_stay_consistent(spark, world):
    for ds in DAYS[:2]:
        world.join(ds)
    location = table_dir(spark, world.table)
    files_before = data_files(location)
    prices_before = {r.impression_id: r.item_price for r in spark.table(world.table).collect()}

    def rename_and_drop(raw: dict) -> None:
        price = feature(raw, "item_price")
        price["renamed_from"], price["name"] = "item_price", "item_price_usd"
        feature(raw, "user_topic_affinity")["lifecycle"] = {"status": "dropped"}

    world.edit(rename_and_drop)
    with pytest.raises(TableError, match=r"item_price -> item_price_usd.*featurehouse features apply --dataset"):
        world.join(DAYS[2])  # a write does not rename or drop by itself

    plan = evolution.make_plan(spark, world.registry())
    assert [(c.action, c.feature) for c in plan.changes] == [
        (Action.RENAME_COLUMN, "item_price_usd"), (Action.DROP_COLUMN, "user_topic_affinity"), (Action.REGISTER, None),
    ]
    evolution.apply(spark, world.registry())

    assert data_files(location) == files_before, "rename or drop rewrote or added a data file"
    table = spark.table(world.table)
    assert "user_topic_affinity" not in table.columns and "item_price" not in table.columns
    assert {r.impression_id: r.item_price_usd for r in table.collect()} == prices_before
    world.join(DAYS[2])  # logs still say item_price: the renamed feature reads its old key
    day3 = spark.table(world.table).where(f"ds = '{DAYS[2]}'").collect()
    assert sorted(r.item_price_usd for r in day3) == [10.0, 11.0, 12.0, 13.0]


def test_an_incompatible_change_or_a_vanished_column_is_refused_with_its_fix(spark, world):
    world.join(DAYS[0])
    world.edit(lambda raw: feature(raw, "user_ctr_7d").update(kind="sparse", dtype="int64", default=[]))
    with pytest.raises(RegistryError, match=r"'user_ctr_7d' is sparse int64 .* table column 'user_ctr_7d' is float; "
                                            r"a feature's kind and dtype cannot change: add a new feature"):
        evolution.make_plan(spark, world.registry())
    with pytest.raises(RegistryError, match="kind and dtype cannot change"):
        world.join(DAYS[1])

    world.edit(lambda raw: raw["features"].remove(feature(raw, "user_ctr_7d")))
    with pytest.raises(RegistryError, match=r"has columns user_ctr_7d that no feature .*\{status: dropped\}"):
        evolution.make_plan(spark, world.registry())


def test_diff_lists_exactly_the_changes_made_to_the_registry_file(spark, world):
    first = evolution.apply(spark, world.registry())
    assert [c.action for c in first.plan.changes] == [Action.CREATE_TABLE, Action.REGISTER]
    assert evolution.make_plan(spark, world.registry()).changes == ()

    def edit(raw: dict) -> None:
        raw["features"].append({"name": "item_ctr_7d", "kind": "dense", "dtype": "float32", "description": "c",
                                "owner": "t"})  # fmt: skip
        price = feature(raw, "item_price")
        price["renamed_from"], price["name"] = "item_price", "item_price_usd"
        feature(raw, "user_topic_ids")["lifecycle"] = {"status": "deprecated", "deprecated_ds": DAYS[1]}
        feature(raw, "user_topic_affinity")["lifecycle"] = {"status": "dropped"}
        feature(raw, "user_ctr_7d")["owner"] = "ranking"

    world.edit(edit)
    plan = evolution.make_plan(spark, world.registry())
    assert [(c.action, c.feature) for c in plan.changes] == [
        (Action.RENAME_COLUMN, "item_price_usd"),
        (Action.DROP_COLUMN, "user_topic_affinity"),
        (Action.ADD_COLUMN, "item_ctr_7d"),
        (Action.UPDATE, "user_ctr_7d"),
        (Action.DEPRECATE, "user_topic_ids"),
    ]
    assert plan.unchanged == 0
    text = plan.format()
    assert "~ rename column          item_price -> item_price_usd" in text
    assert "user_ctr_7d: owner 't' -> 'ranking'" in text
    assert f"user_topic_ids from {DAYS[1]}" in text

    evolution.apply(spark, world.registry())
    assert evolution.make_plan(spark, world.registry()).changes == ()
    status = {r.feature: r.status for r in spark.table("featurehouse_catalog.features").collect()
              if r.dataset == world.registry().dataset}  # fmt: skip
    assert status["user_topic_ids"] == "deprecated" and status["user_topic_affinity"] == "dropped"

    # deprecated from day 2: day 1 keeps its values, day 2 is written null although the logs carry them
    world.join(DAYS[0])
    world.join(DAYS[1])
    topics = {r.ds: r.n for r in spark.sql(
        f"SELECT ds, count(user_topic_ids) AS n FROM {world.table} GROUP BY ds").collect()}  # fmt: skip
    assert topics == {DAYS[0]: 4, DAYS[1]: 0}


def test_a_table_without_column_mapping_is_upgraded_before_its_first_rename(spark, world):
    from delta.tables import DeltaTable

    from schemas.spark import table_schema
    from warehouse.tables import replace_partition

    registry = world.registry()
    spark.sql("CREATE DATABASE IF NOT EXISTS featurehouse")
    # created the way tables were before column mapping: no table properties
    DeltaTable.createIfNotExists(spark).tableName(world.table).addColumns(table_schema(registry)).partitionedBy(
        "ds"
    ).execute()
    row = {c: None for c in registry.columns} | {"impression_id": "x", "label_click": 1, "label_conversion": 0,
                                                 "item_price": 2.5, "ds": DAYS[0]}  # fmt: skip
    replace_partition(spark, world.table, spark.createDataFrame([row], table_schema(registry)),
                      dt.date.fromisoformat(DAYS[0]))
    files_before = data_files(table_dir(spark, world.table))

    def rename(raw: dict) -> None:
        price = feature(raw, "item_price")
        price["renamed_from"], price["name"] = "item_price", "price"

    world.edit(rename)
    plan = evolution.make_plan(spark, world.registry())
    assert [c.action for c in plan.changes] == [Action.ENABLE_COLUMN_MAPPING, Action.RENAME_COLUMN, Action.REGISTER]
    evolution.apply(spark, world.registry())
    properties = spark.sql(f"DESCRIBE DETAIL {world.table}").first()["properties"]
    assert properties["delta.columnMapping.mode"] == "name"
    assert data_files(table_dir(spark, world.table)) == files_before
    assert [r.price for r in spark.table(world.table).collect()] == [2.5]
