"""Per-ds feature statistics against direct computations on the same partition, and bytes against the footers."""

from __future__ import annotations

import datetime as dt
import random
from urllib.parse import urlparse

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from schemas.catalog import DENSE_QUANTILES, FEATURE_STATS, FEATURE_STATS_SCHEMA, LENGTH_QUANTILES, catalog_table
from schemas.errors import TableError
from schemas.registry import DatasetRegistry, Kind, parse_registry
from schemas.spark import table_schema
from tests.conftest import SMALL_REGISTRY, dataset_name
from warehouse.stats import DISTINCT_RSD, compute_partition_stats, refresh_partition_stats, write_partition_stats
from warehouse.tables import replace_partition, table_name

pytestmark = pytest.mark.spark

DS1, DS2 = "2026-11-01", "2026-11-02"
SIZES = {DS1: 300, DS2: 120}
#: HLL++ at rsd 5%: three standard deviations.
DISTINCT_TOLERANCE = 3 * DISTINCT_RSD
NOW = dt.datetime(2026, 11, 3, 12, 0, tzinfo=dt.UTC)


def small_registry(dataset: str, *, rename: tuple[str, str] | None = None, extra: bool = False) -> DatasetRegistry:
    """SMALL_REGISTRY, optionally with one feature renamed (old, new) and one feature the table lacks."""
    raw = yaml.safe_load(SMALL_REGISTRY.format(dataset=dataset))
    if rename:
        for feature in raw["features"]:
            if feature["name"] == rename[0]:
                feature.update(name=rename[1], renamed_from=rename[0])
    if extra:
        raw["features"].append(
            {"name": "brand_new", "kind": "dense", "dtype": "float32", "description": "new", "owner": "t"}
        )
    return parse_registry(raw, source=f"<test {dataset}>")


def make_rows(ds: str, n: int, seed: int) -> list[tuple]:
    """Seeded rows: ~15% null features, empty lists, repeated dense values, ids drawn from a few hundred."""
    rng = random.Random(seed)

    def maybe(value, p_null=0.15):
        return None if rng.random() < p_null else value

    rows = []
    for i in range(n):
        topics = [rng.randrange(400) for _ in range(rng.choice([0, 0, 1, 2, 3, 5, 8]))]
        affinity = [(rng.randrange(250), rng.random()) for _ in range(rng.choice([0, 1, 2, 4]))]
        rows.append((
            f"{ds}-{i}", rng.randrange(50), rng.randrange(80), dt.datetime.fromisoformat(f"{ds}T10:00:00"),
            rng.randint(0, 1), rng.randint(0, 1),
            maybe(rng.choice([0.0, 0.25, 1.5]) if rng.random() < 0.2 else rng.gauss(0.03, 0.02)),
            maybe(round(rng.lognormvariate(3, 1), 2)),
            maybe(topics, 0.1),
            maybe(affinity, 0.2),
            ds,
        ))
    return rows


def create_table(spark, registry: DatasetRegistry, *, column_mapping: bool) -> str:
    name = table_name(registry.dataset)
    spark.sql("CREATE DATABASE IF NOT EXISTS featurehouse")
    builder = DeltaTable.createIfNotExists(spark).tableName(name).addColumns(table_schema(registry)).partitionedBy("ds")
    if column_mapping:
        builder = builder.property("delta.columnMapping.mode", "name")
    builder.execute()
    return name


def write_ds(spark, registry: DatasetRegistry, table: str, ds: str, *, n: int, seed: int) -> int:
    frame = spark.createDataFrame(make_rows(ds, n, seed), table_schema(registry)).repartition(3)
    return replace_partition(spark, table, frame, dt.date.fromisoformat(ds)).version


def feature_table(
    spark, dataset: str, *, column_mapping: bool = True, partitions: tuple[str, ...] = (DS1, DS2)
) -> tuple[DatasetRegistry, str]:
    """A feature table of SMALL_REGISTRY with ``partitions`` (3 files each); -> (registry, table)."""
    registry = small_registry(dataset)
    table = create_table(spark, registry, column_mapping=column_mapping)
    for seed, ds in enumerate(partitions):
        write_ds(spark, registry, table, ds, n=SIZES[ds], seed=seed)
    return registry, table


@pytest.fixture(scope="module")
def shared_tables(spark) -> dict[str, tuple[DatasetRegistry, str]]:
    """Tables the tests only read: one with column mapping, one without."""
    return {
        "mapped": feature_table(spark, "t_test_stats_mapped"),
        "plain": feature_table(spark, "t_test_stats_plain", column_mapping=False),
    }


@pytest.fixture
def mapped(shared_tables) -> tuple[DatasetRegistry, str]:
    return shared_tables["mapped"]


@pytest.fixture
def own_table(spark, request) -> tuple[DatasetRegistry, str]:
    """A column-mapped table of the test's own, for tests that change it."""
    return feature_table(spark, dataset_name(request))


def inverted_cdf(values, qs) -> list[float]:
    """The smallest value whose empirical CDF reaches q, for each q."""
    return [float(np.quantile(np.asarray(values, dtype=np.float64), q, method="inverted_cdf")) for q in qs]


def footer_bytes(spark, table: str, ds: str | None) -> dict[str, int]:
    """Compressed bytes per column, summed over the files that hold the rows of ``ds`` (all files: None).

    Found without Delta's log: the files from Spark's ``_metadata.file_path``, and
    the physical names by position (a file holds the columns in table order; ds,
    the last, may be in it too), so the i-th top-level name is the i-th column.
    """
    frame = spark.table(table) if ds is None else spark.table(table).where(F.col("ds") == ds)
    paths = {urlparse(row[0]).path for row in frame.select("_metadata.file_path").distinct().collect()}
    logical = spark.table(table).columns
    assert logical[-1] == "ds"
    totals = dict.fromkeys(logical, 0)
    for path in paths:
        metadata = pq.read_metadata(path)
        physical = metadata.schema.to_arrow_schema().names
        assert len(physical) in (len(logical) - 1, len(logical))
        by_physical = dict(zip(physical, logical, strict=False))
        for group in metadata.to_dict()["row_groups"]:
            for chunk in group["columns"]:
                totals[by_physical[chunk["path_in_schema"].split(".")[0]]] += chunk["total_compressed_size"]
    return totals


def test_statistics_equal_a_direct_computation(spark, mapped):
    registry, table = mapped
    stats = compute_partition_stats(spark, registry, dt.date.fromisoformat(DS1), now=NOW)
    pdf = spark.table(table).where(F.col("ds") == DS1).toPandas()
    n = len(pdf)
    assert n == SIZES[DS1] == stats.rows
    assert [row["feature"] for row in stats.features] == [f.name for f in registry.stored_features]
    assert all(list(row) == FEATURE_STATS_SCHEMA.names for row in stats.features)
    assert 10_000 >= 2 * n  # the default accuracy: quantiles are exact (see the next test)
    by_name = stats.by_feature()
    for feature in registry.stored_features:
        row = by_name[feature.name]
        present = pdf[feature.name][pdf[feature.name].notna()]
        assert (row["dataset"], row["ds"], row["kind"], row["table_version"]) == (
            registry.dataset, DS1, feature.kind.value, stats.table_version
        )
        assert (row["rows"], row["non_null"], row["computed_at"]) == (n, len(present), NOW)
        assert 0 < len(present) < n
        assert row["coverage"] == len(present) / n
        assert row["bytes_on_disk"] > 0
        if feature.kind is Kind.DENSE:
            values = present.to_numpy(dtype=np.float64)  # float32 values compared in float64
            assert (row["min"], row["max"]) == (values.min(), values.max())
            assert row["mean"] == pytest.approx(values.mean(), rel=1e-9)
            assert row["stddev"] == pytest.approx(values.std(ddof=1), rel=1e-9)
            assert [row[name] for name, _ in DENSE_QUANTILES] == inverted_cdf(values, [q for _, q in DENSE_QUANTILES])
            assert row["len_mean"] is None and row["len_p50"] is None and row["approx_distinct_ids"] is None
        else:
            lengths = np.array([len(items) for items in present])
            assert 0 in lengths  # an empty list is present, with length 0
            assert row["len_mean"] == pytest.approx(lengths.mean(), rel=1e-12)
            length_qs = [q for _, q in LENGTH_QUANTILES]
            assert [row[name] for name, _ in LENGTH_QUANTILES] == inverted_cdf(lengths, length_qs)
            ids = {item if feature.kind is Kind.SPARSE else item["id"] for items in present for item in items}
            assert abs(row["approx_distinct_ids"] - len(ids)) <= DISTINCT_TOLERANCE * len(ids)
            assert row["min"] is None and row["p50"] is None and row["stddev"] is None


def test_percentile_approx_is_exact_from_accuracy_2n(spark, mapped):
    """Spark keeps every value while floor(2 * count / accuracy) is 0 (its compress threshold), so from
    accuracy = 2n on, percentile_approx is numpy's ``inverted_cdf``; at accuracy = n it is off by a rank."""
    registry, table = mapped
    values = spark.table(table).where(F.col("ds") == DS2).toPandas()["item_price"].dropna().to_numpy(np.float64)
    assert len(set(values)) > 90  # few ties: a rank off would show
    stats = compute_partition_stats(spark, registry, dt.date.fromisoformat(DS2),
                                    accuracy=2 * len(values)).by_feature()["item_price"]
    assert [stats[name] for name, _ in DENSE_QUANTILES] == inverted_cdf(values, [q for _, q in DENSE_QUANTILES])


@pytest.mark.parametrize("layout", ["mapped", "plain"])
def test_bytes_on_disk_equal_the_partition_footers(spark, shared_tables, layout):
    registry, table = shared_tables[layout]
    stats = {ds: compute_partition_stats(spark, registry, dt.date.fromisoformat(ds)) for ds in SIZES}
    for ds in SIZES:
        expected = footer_bytes(spark, table, ds)
        assert stats[ds].files == 3
        assert {name: row["bytes_on_disk"] for name, row in stats[ds].by_feature().items()} == {
            f.name: expected[f.name] for f in registry.stored_features
        }
    whole = footer_bytes(spark, table, None)  # each file counted once, in its own ds
    for feature in registry.stored_features:
        per_ds = [stats[ds].by_feature()[feature.name]["bytes_on_disk"] for ds in SIZES]
        assert sum(per_ds) == whole[feature.name]
    physical = pq.read_metadata(urlparse(spark.table(table).inputFiles()[0]).path).schema.to_arrow_schema().names
    if layout == "mapped":
        assert all(name.startswith("col-") for name in physical)
    else:  # logical names (Delta 4.4 writes ds into the files as well)
        assert physical[: len(registry.columns) - 1] == list(registry.columns[:-1])


def test_a_renamed_feature_keeps_its_bytes_and_stats(spark, request):
    registry, table = feature_table(spark, dataset_name(request), partitions=(DS1,))
    before = compute_partition_stats(spark, registry, dt.date.fromisoformat(DS1), now=NOW)
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN user_topic_ids TO topic_ids")
    renamed = small_registry(registry.dataset, rename=("user_topic_ids", "topic_ids"))
    after = compute_partition_stats(spark, renamed, dt.date.fromisoformat(DS1), now=NOW)
    assert (after.table_version, after.skipped) == (before.table_version + 1, ())
    old, new = before.by_feature()["user_topic_ids"], after.by_feature()["topic_ids"]
    assert new == {**old, "feature": "topic_ids", "table_version": after.table_version}
    assert new["bytes_on_disk"] == footer_bytes(spark, table, DS1)["topic_ids"] > 0
    # The registry of before the rename misses the column: it is skipped, the rest unchanged.
    stale = compute_partition_stats(spark, registry, dt.date.fromisoformat(DS1), now=NOW)
    assert stale.skipped == ("user_topic_ids",)
    unchanged = {**before.by_feature()["item_price"], "table_version": after.table_version}
    assert stale.by_feature()["item_price"] == unchanged


def stats_rows(spark, dataset: str) -> dict[str, int]:
    frame = spark.table(catalog_table(FEATURE_STATS)).where(F.col("dataset") == dataset)
    return {row["ds"]: row["count"] for row in frame.groupBy("ds").count().collect()}


def test_a_rewritten_ds_keeps_its_old_version_and_writing_again_replaces_its_rows(spark, own_table):
    registry, table = own_table
    features = len(registry.stored_features)
    first = {ds: compute_partition_stats(spark, registry, dt.date.fromisoformat(ds), now=NOW) for ds in SIZES}
    for stats in first.values():
        write_partition_stats(spark, stats)
    assert stats_rows(spark, registry.dataset) == {DS1: features, DS2: features}

    write_ds(spark, registry, table, DS1, n=50, seed=7)
    pinned = compute_partition_stats(spark, registry, dt.date.fromisoformat(DS1), version=first[DS1].table_version,
                                     now=NOW)
    assert pinned.features == first[DS1].features  # that version's data and files, not the table's current ones

    later = NOW + dt.timedelta(days=1)
    stats = refresh_partition_stats(spark, small_registry(registry.dataset, extra=True), dt.date.fromisoformat(DS1),
                                    now=later)  # both steps
    assert (stats.rows, stats.table_version, stats.skipped) == (50, first[DS1].table_version + 1, ("brand_new",))
    version = DeltaTable.forName(spark, catalog_table(FEATURE_STATS)).history(1).first()["version"]
    assert stats.catalog_version == version
    assert stats_rows(spark, registry.dataset) == {DS1: features, DS2: features}
    collected = spark.table(catalog_table(FEATURE_STATS)).where(F.col("dataset") == registry.dataset).collect()
    rows = [{**r.asDict(), "computed_at": r["computed_at"].astimezone(dt.UTC)} for r in collected]  # naive: local
    assert {(r["ds"], r["rows"], r["computed_at"]) for r in rows} == {(DS1, 50, later), (DS2, SIZES[DS2], NOW)}
    assert {r["feature"]: r for r in rows if r["ds"] == DS1} == stats.by_feature()
    summary = stats.format()
    assert f"ds={DS1}" in summary and "50 rows in" in summary and "(2 dense, 2 sparse)" in summary
    assert "skipped (not in the table yet): brand_new" in summary
    assert f"written to featurehouse_catalog.feature_stats version {version}" in summary


def test_an_empty_ds_or_a_missing_table_is_a_table_error(spark, mapped):
    registry, table = mapped
    with pytest.raises(TableError) as err:
        compute_partition_stats(spark, registry, dt.date(2026, 11, 9))
    version = DeltaTable.forName(spark, table).history(1).first()["version"]
    assert str(err.value) == (
        f"ds 2026-11-09 has no rows in table {table} at version {version}; run `featurehouse label-join "
        f"--dataset {registry.dataset} --ds 2026-11-09` first"
    )
    with pytest.raises(TableError, match=r"^table featurehouse\.no_such_dataset does not exist; run `featurehouse "):
        compute_partition_stats(spark, small_registry("no_such_dataset"), dt.date.fromisoformat(DS1))
