"""Usage rows written without a JVM (deltalake) land in the catalog table Spark created and queries."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from ingest.usage import UsageRecord, record_usage
from schemas.catalog import FEATURE_USAGE, catalog_table_uri
from schemas.errors import ConfigError, InvalidNameError, TableError
from schemas.registry import parse_registry
from tests.conftest import dataset_name
from warehouse.catalog import ensure_catalog, sync_features

pytestmark = pytest.mark.spark

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def usage(dataset: str, job_id: str, features: list[str], days_ago: int, **extra) -> UsageRecord:
    started = NOW - dt.timedelta(days=days_ago)
    fields = dict(job_id=job_id, dataset=dataset, ds_from="2026-11-01", ds_to="2026-11-07", features=features,
                  bytes_read=1000, rows_read=10, table_version=3, started_at=started,
                  ended_at=started + dt.timedelta(minutes=5))  # fmt: skip
    return UsageRecord(**{**fields, **extra})


def test_usage_rows_appended_without_spark_are_read_by_spark_sql_and_the_views(spark, spark_home, request):
    dataset = dataset_name(request)
    ensure_catalog(spark)
    registry = parse_registry({
        "dataset": dataset, "labels": [{"name": "click", "window": "1h"}],
        "features": [{"name": n, "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"}
                     for n in ("a", "b", "c")],
    }, source="inline")  # fmt: skip
    sync_features(spark, registry)
    uri = catalog_table_uri(str(spark_home / "warehouse"), FEATURE_USAGE)
    assert f"file:{uri}" == spark.sql(f"DESCRIBE DETAIL featurehouse_catalog.{FEATURE_USAGE}").first()["location"]

    records = [
        usage(dataset, "ctr-model", ["a", "b"], days_ago=1),
        usage(dataset, "ctr-model", ["a"], days_ago=2),
        usage(dataset, "cvr-model", ["a"], days_ago=20),
    ]
    from deltalake import DeltaTable

    before = DeltaTable(uri).version()  # the session's catalog: other tests may have recorded into it already
    version = record_usage(uri, records)
    assert version == before + 1  # the three rows in one commit, the table's latest, as Spark sees it too
    assert spark.sql(f"DESCRIBE HISTORY featurehouse_catalog.{FEATURE_USAGE} LIMIT 1").first()["version"] == version

    rows = spark.sql(
        "SELECT run_id, job_id, features, bytes_read, started_at FROM featurehouse_catalog.feature_usage "
        f"WHERE dataset = '{dataset}'"
    ).collect()
    assert sorted((r.run_id, r.job_id, list(r.features)) for r in rows) == sorted(
        (r.run_id, r.job_id, list(r.features)) for r in records
    )
    popularity = {
        r.feature: (r.jobs_7d, r.jobs_30d, r.runs_total)
        for r in spark.sql(f"SELECT * FROM featurehouse_catalog.feature_popularity WHERE dataset = '{dataset}'").collect()
    }
    assert popularity == {"a": (1, 2, 3), "b": (1, 1, 1), "c": (0, 0, 0)}
    unused = [r.feature for r in spark.sql(
        f"SELECT feature FROM featurehouse_catalog.unused_features WHERE dataset = '{dataset}'").collect()]  # fmt: skip
    assert unused == ["c"]


def test_bad_usage_records_are_refused_with_their_fix(tmp_path):
    with pytest.raises(InvalidNameError, match="feature"):
        usage("ads", "job", ["Bad-Name"], days_ago=0)
    with pytest.raises(ConfigError, match="ended .* before it started"):
        usage("ads", "job", ["a"], days_ago=0, ended_at=NOW - dt.timedelta(days=1))
    with pytest.raises(ConfigError, match="no time zone"):
        usage("ads", "job", ["a"], days_ago=0, started_at=dt.datetime(2026, 11, 1), ended_at=dt.datetime(2026, 11, 2))
    with pytest.raises(ConfigError, match="ds_to 2026-10-01 is before ds_from"):
        usage("ads", "job", ["a"], days_ago=0, ds_to="2026-10-01")
    with pytest.raises(TableError, match="catalog sync"):
        record_usage(str(tmp_path / "nowhere"), [usage("ads", "job", ["a"], days_ago=0)])


def test_a_usage_table_from_before_the_cost_columns_gains_them_and_keeps_its_rows(tmp_path):
    from deltalake import DeltaTable, write_deltalake

    from ingest.projected_reads import IoCounter
    from schemas.catalog import FEATURE_USAGE_SCHEMA

    old_schema = pa.schema([f for f in FEATURE_USAGE_SCHEMA if f.name not in (*COST_COLUMNS, *TRAIN_COLUMNS)])
    uri = str(tmp_path / "feature_usage")
    old = usage("ads", "old-job", ["a"], days_ago=3)
    write_deltalake(uri, pa.Table.from_pylist([old.row()], schema=old_schema))
    cost = IoCounter(batches=7, bytes_all_columns=9000, io_s=0.5, read_s=2.0, convert_s=1.0, assemble_s=0.25, wait_s=3.0)
    record_usage(uri, [usage("ads", "new-job", ["a"], days_ago=0, cost=cost, compute_s=4.0, stall_fraction=0.4)])
    rows = {r["job_id"]: r for r in DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert rows.keys() == {"old-job", "new-job"}
    assert all(rows["old-job"][c] is None for c in (*COST_COLUMNS, *TRAIN_COLUMNS))
    assert (rows["new-job"]["compute_s"], rows["new-job"]["samples_per_s"], rows["new-job"]["stall_fraction"]) == (
        4.0, None, 0.4)
    assert {c: rows["new-job"][c] for c in COST_COLUMNS} == {
        "batches": 7, "bytes_all_columns": 9000, "io_s": 0.5, "decode_s": 1.5, "transform_s": 1.0,
        "batching_s": 0.25, "wait_s": 3.0,
    }  # fmt: skip


COST_COLUMNS = ("batches", "bytes_all_columns", "io_s", "decode_s", "transform_s", "batching_s", "wait_s")
TRAIN_COLUMNS = ("compute_s", "samples_per_s", "stall_fraction")
