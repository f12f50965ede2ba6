"""``featurehouse read`` end to end on a table Spark wrote: tensors against pandas, and the usage record."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from delta.tables import DeltaTable

from ingest.read_command import ReadConfig, run
from ingest.transforms import splitmix64
from schemas.registry import load_dataset
from schemas.spark import table_schema
from tests.conftest import dataset_name
from warehouse.catalog import ensure_catalog
from warehouse.stats import refresh_partition_stats
from warehouse.tables import replace_partition

pytestmark = pytest.mark.spark

DAYS = ["2026-11-01", "2026-11-02"]


def registry_file(directory: Path, dataset: str, *, with_b: bool) -> None:
    features = [
        {"name": "k", "kind": "dense", "dtype": "float64", "description": "row key", "owner": "o"},
        {"name": "a", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"},
        {"name": "s", "kind": "sparse", "dtype": "int64", "default": [], "description": "s", "owner": "o"},
    ]
    if with_b:
        features.append({"name": "b", "kind": "dense", "dtype": "float32", "default": 2.5, "description": "b",
                         "owner": "o"})  # fmt: skip
    raw = {"dataset": dataset, "labels": [{"name": "click", "window": "1h"}], "features": features}
    (directory / f"{dataset}.yaml").write_text(yaml.safe_dump(raw))


def test_read_gives_the_reference_tensors_and_records_its_usage(spark, spark_home, request, tmp_path):
    dataset, registry_dir = dataset_name(request), tmp_path / "registry"
    registry_dir.mkdir()
    registry_file(registry_dir, dataset, with_b=False)
    registry = load_dataset(dataset, registry_dir)
    table = f"featurehouse.{dataset}"
    spark.sql("CREATE DATABASE IF NOT EXISTS featurehouse")
    DeltaTable.createIfNotExists(spark).tableName(table).addColumns(table_schema(registry)).partitionedBy("ds").property(
        "delta.columnMapping.mode", "name").execute()  # fmt: skip
    day = ("concat(ds, '-', id) AS impression_id", "id AS user_id", "id AS item_id", "TIMESTAMP '2026-11-01' AS event_time",
           "CAST(id % 3 = 0 AS INT) AS label_click", "id + IF(ds = '2026-11-02', 1000, 0) AS k",
           "CAST(id / 400.0 AS FLOAT) AS a",
           "CASE WHEN id % 5 = 0 THEN NULL ELSE sequence(id, id + id % 4) END AS s")  # fmt: skip
    frame = spark.range(300).selectExpr(f"'{DAYS[0]}' AS ds", "id").selectExpr(*day, "ds")
    replace_partition(spark, table, frame, DAYS[0])
    spark.sql(f"ALTER TABLE {table} ADD COLUMNS (b FLOAT)")
    registry_file(registry_dir, dataset, with_b=True)
    frame = spark.range(200).selectExpr(f"'{DAYS[1]}' AS ds", "id").selectExpr(*day, "CAST(id AS FLOAT) AS b", "ds")
    replace_partition(spark, table, frame, DAYS[1])
    registry = load_dataset(dataset, registry_dir)
    for ds in DAYS:
        refresh_partition_stats(spark, registry, ds)
    ensure_catalog(spark)

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "job_id": "test-job", "dataset": dataset, "ds": {"from": DAYS[0], "to": DAYS[1]},
        "features": [{"name": "k"}, {"name": "a", "transforms": ["standardize", {"clamp": [-1, 0.5]}]}, {"name": "b"},
                     {"name": "s", "transforms": [{"hash": 100}, {"truncate": 2}]}],
        "labels": ["click"], "batch_size": 128, "seed": 3,
    }))  # fmt: skip
    lines: list[str] = []
    usage = run(ReadConfig(job=job, home=spark_home, registry_dir=registry_dir), progress=lines.append)

    reference = spark.table(table).toPandas()
    assert usage.rows_read == len(reference) == 500
    recorded = spark.sql(
        f"SELECT * FROM featurehouse_catalog.feature_usage WHERE job_id = 'test-job' AND dataset = '{dataset}'"
    ).collect()
    assert [(list(r.features), r.rows_read, r.batches) for r in recorded] == [(["k", "a", "b", "s"], 500, 4)]
    assert recorded[0].bytes_read > 0 and recorded[0].bytes_all_columns > 0
    assert all(recorded[0][c] >= 0 for c in ("io_s", "decode_s", "transform_s", "batching_s", "wait_s"))
    assert any("500 rows" in line for line in lines) and any("recorded in featurehouse_catalog" in line for line in lines)

    # the tensors: rebuild every batch's rows from the reference and compare
    from ingest.job_reader import open_reader
    from ingest.spec import load_spec

    spec, registry = load_spec(job, registry_dir=registry_dir)
    reader = open_reader(spec, registry, warehouse=str(spark_home / "warehouse"))
    batches = list(reader.dataset)
    stats = spark.sql(f"SELECT non_null, mean, stddev FROM featurehouse_catalog.feature_stats "
                      f"WHERE dataset = '{dataset}' AND feature = 'a'").toPandas()  # fmt: skip
    n = stats["non_null"].to_numpy(np.float64)
    pooled_mean = (n * stats["mean"]).sum() / n.sum()
    pooled_var = ((n - 1) * stats["stddev"] ** 2 + n * (stats["mean"] - pooled_mean) ** 2).sum() / (n.sum() - 1)
    expected = {}
    for row in reference.itertuples():
        standardized = np.float32(min(max((row.a - pooled_mean) / math.sqrt(pooled_var), -1.0), 0.5))
        b = 2.5 if row.ds == DAYS[0] else row.b  # b was added after day 1: its default there
        ids = [] if row.s is None else [int(x) for x in splitmix64(np.asarray(row.s, dtype=np.int64)) % 100][:2]
        expected[row.k] = (standardized, np.float32(b), ids, float(row.label_click))
    got = {}
    for batch in batches:
        rows = len(batch)
        offsets = batch.offsets.numpy()  # one sparse key: rows' lists are offsets[i]:offsets[i + 1]
        values = batch.values.numpy()
        for i in range(rows):
            got[float(batch.dense[i, 0])] = (
                batch.dense[i, 1].numpy(), batch.dense[i, 2].numpy(), values[offsets[i]:offsets[i + 1]].tolist(),
                float(batch.labels[i, 0]),
            )  # fmt: skip
    assert got.keys() == expected.keys() and len(got) == 500
    for k, (a_value, b_value, ids, label) in expected.items():
        assert got[k][0] == pytest.approx(a_value, rel=1e-5, abs=1e-6), k
        assert (got[k][1], got[k][2], got[k][3]) == (b_value, ids, label), k
