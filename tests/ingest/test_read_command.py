"""``featurehouse read`` end to end on a table Spark wrote: tensors against pandas, and the usage record."""

from __future__ import annotations

import datetime as dt
import math
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pyarrow.parquet as pq
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


def expected_bytes(spark, table: str, columns: list[str], batch_sizes: list[int]) -> tuple[int, int, int]:
    """(bytes_read, bytes_all_columns, the footers' part of bytes_read) of an unshuffled epoch of ``columns`` in
    batches of ``batch_sizes``, as the reader defines them, from the Parquet files alone: each file's footer (its
    last 8 bytes and the footer they announce) once to plan, then for each row group the read columns' chunks
    (``total_compressed_size``, one request each: the job sets ``read_gap: null``); all columns: for each batch's
    piece of a row group, its share of the group's chunks, ``bytes * piece_rows // group_rows``."""
    import deltalake

    location = spark.sql(f"DESCRIBE DETAIL {table}").first()["location"]
    physical = {f.name: str(f.metadata.get("delta.columnMapping.physicalName") or f.name)
                for f in deltalake.DeltaTable(location).schema().fields}  # fmt: skip
    wanted = {physical[c] for c in columns}
    files = spark.table(table).select("ds", "_metadata.file_path").distinct().collect()
    paths = [urlparse(uri).path for _ds, uri in sorted(files)]  # the reader's order: ds, then path
    footers, chunks_read, groups = 0, 0, []  # groups: (rows, bytes of all columns) in stream order
    for path in paths:
        with open(path, "rb") as f:
            f.seek(-8, 2)
            footer = 8 + int.from_bytes(f.read(4), "little")
        footers += footer  # planning
        metadata = pq.read_metadata(path)
        for g in range(metadata.num_row_groups):
            chunks = [metadata.row_group(g).column(c) for c in range(metadata.num_columns)]
            chunks_read += sum(c.total_compressed_size for c in chunks if c.path_in_schema.split(".")[0] in wanted)
            groups.append((metadata.row_group(g).num_rows, sum(c.total_compressed_size for c in chunks)))
    all_columns, start, bounds = 0, 0, np.cumsum([0, *batch_sizes])
    for rows, size in groups:  # each batch's piece of each row group
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            taken = min(hi, start + rows) - max(lo, start)
            all_columns += size * taken // rows if taken > 0 else 0
        start += rows
    return footers + chunks_read, int(all_columns), footers


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
    replace_partition(spark, table, frame, dt.date.fromisoformat(DAYS[0]))
    spark.sql(f"ALTER TABLE {table} ADD COLUMNS (b FLOAT)")
    registry_file(registry_dir, dataset, with_b=True)
    frame = spark.range(200).selectExpr(f"'{DAYS[1]}' AS ds", "id").selectExpr(*day, "CAST(id AS FLOAT) AS b", "ds")
    replace_partition(spark, table, frame, dt.date.fromisoformat(DAYS[1]))
    registry = load_dataset(dataset, registry_dir)
    for ds in DAYS:
        refresh_partition_stats(spark, registry, dt.date.fromisoformat(ds))
    ensure_catalog(spark)

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "job_id": "test-job", "dataset": dataset, "ds": {"from": DAYS[0], "to": DAYS[1]},
        "features": [{"name": "k"}, {"name": "a", "transforms": ["standardize", {"clamp": [-1, 0.5]}]}, {"name": "b"},
                     {"name": "s", "transforms": [{"hash": 100}, {"truncate": 2}]}],
        "labels": ["click"], "batch_size": 128, "seed": 3, "read_gap": None,
    }))  # fmt: skip
    lines: list[str] = []
    started = time.perf_counter()
    usage = run(ReadConfig(job=job, home=spark_home, registry_dir=registry_dir), progress=lines.append)
    wall = time.perf_counter() - started

    reference = spark.table(table).toPandas()
    assert usage.rows_read == len(reference) == 500
    recorded = spark.sql(
        f"SELECT * FROM featurehouse_catalog.feature_usage WHERE job_id = 'test-job' AND dataset = '{dataset}'"
    ).collect()
    assert [(list(r.features), r.rows_read, r.batches) for r in recorded] == [(["k", "a", "b", "s"], 500, 4)]
    # 500 rows in 4 batches of 125, unshuffled; the columns read: the features and the label, not the keys
    bytes_read, bytes_all_columns, footers = expected_bytes(spark, table, ["k", "a", "b", "s", "label_click"], [125] * 4)
    assert (recorded[0].bytes_read, recorded[0].bytes_all_columns) == (bytes_read, bytes_all_columns)
    assert bytes_read - footers < bytes_all_columns  # the projection left the key columns unread
    cost = usage.cost  # where the time went, recorded as it was counted
    assert [recorded[0][c] for c in ("io_s", "decode_s", "transform_s", "batching_s", "wait_s")] == [
        cost.io_s, cost.decode_s, cost.convert_s, cost.shuffle_s + cost.assemble_s, cost.wait_s]
    assert min(cost.io_s, cost.read_s, cost.convert_s, cost.shuffle_s, cost.assemble_s, cost.wait_s) >= 0
    # three threads at once, each within the call: the read-ahead one reads (I/O inside it, the rest decoding),
    # the batching one transforms, shuffles and gathers, the caller waits for batches
    assert cost.io_s + cost.decode_s == pytest.approx(cost.read_s)  # decode_s is read_s - io_s: I/O is inside
    assert cost.read_s <= wall and cost.convert_s + cost.shuffle_s + cost.assemble_s <= wall and cost.wait_s <= wall
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
