"""The reader's snapshot and projected reads, on a real Delta table Spark wrote (read back without Spark)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable

from ingest.projected_reads import IoCounter, read_row_groups
from ingest.snapshot import open_snapshot
from schemas.errors import TableError
from schemas.registry import parse_registry
from schemas.spark import table_schema
from warehouse.tables import replace_partition

pytestmark = pytest.mark.spark

DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
DENSE, SPARSE = 30, 8
ROWS = 60_000


def registry_of(dataset: str, *, added: bool = False, renamed: bool = False):
    features = [{"name": f"d{i}", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"}
                for i in range(DENSE)]  # fmt: skip
    features += [{"name": f"s{i}", "kind": "sparse", "dtype": "int64", "default": [], "description": "s", "owner": "o"}
                 for i in range(SPARSE)]  # fmt: skip
    if renamed:
        features[1] = {**features[1], "name": "d1_renamed", "renamed_from": "d1"}
    if added:
        features.append({"name": "late", "kind": "dense", "dtype": "float32", "default": 7.5, "description": "l",
                         "owner": "o"})  # fmt: skip
    raw = {"dataset": dataset, "labels": [{"name": "click", "window": "1h"}], "features": features}
    return parse_registry(raw, source=f"{dataset}.yaml")


@pytest.fixture(scope="module")
def table(spark):
    """60k rows a day over two days, then d1 renamed, `late` added, and a third day written with it."""
    dataset = "t_reader_table"
    registry = registry_of(dataset)
    name = f"featurehouse.{dataset}"
    spark.sql("CREATE DATABASE IF NOT EXISTS featurehouse")
    DeltaTable.createIfNotExists(spark).tableName(name).addColumns(table_schema(registry)).partitionedBy("ds").property(
        "delta.columnMapping.mode", "name").execute()  # fmt: skip

    def write(ds: str, reg) -> None:
        dense = [f"CAST(rand({i}) * 100 AS FLOAT) AS {f.name}" for i, f in enumerate(reg.stored_features)
                 if f.kind.value == "dense"]  # fmt: skip
        sparse = [f"transform(sequence(1, 1 + CAST(rand({100 + i}) * 20 AS INT)), x -> CAST(rand() * 1e6 AS BIGINT)) "
                  f"AS {f.name}" for i, f in enumerate(reg.stored_features) if f.kind.value == "sparse"]  # fmt: skip
        frame = spark.range(ROWS).selectExpr(
            "concat('i', id) AS impression_id", "id AS user_id", "id AS item_id",
            f"TIMESTAMP '{ds} 00:00:00' AS event_time", "CAST(id % 2 AS INT) AS label_click", *dense, *sparse,
            f"'{ds}' AS ds",
        ).repartition(1)  # fmt: skip
        replace_partition(spark, name, frame, dt.date.fromisoformat(ds))

    for ds in DAYS[:2]:
        write(ds, registry)
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN d1 TO d1_renamed")
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (late FLOAT)")
    evolved = registry_of(dataset, added=True, renamed=True)
    write(DAYS[2], evolved)
    location = spark.sql(f"DESCRIBE DETAIL {name}").first()["location"]
    return name, location, evolved


def test_the_snapshot_lists_only_the_chosen_partitions_from_the_log(spark, table):
    name, location, _registry = table
    snapshot = open_snapshot(location, [dt.date(2026, 11, 2), dt.date(2026, 11, 9)])
    assert snapshot.version == DeltaTable.forName(spark, name).history(1).first()["version"]
    assert {f.ds for f in snapshot.files} == {"2026-11-02"} and snapshot.missing_days == ("2026-11-09",)
    assert sorted(f.uri.removeprefix("file://") for f in snapshot.files) == sorted(
        p.removeprefix("file:") for p in spark.table(name).where("ds = '2026-11-02'").inputFiles()
    )
    assert snapshot.rows == ROWS
    assert snapshot.physical["d1_renamed"].startswith("col-")
    with pytest.raises(TableError, match=r"cannot read the Delta log of .* at version 99"):
        open_snapshot(location, [dt.date(2026, 11, 2)], version=99)


def test_reading_2_of_38_features_reads_about_their_compressed_bytes_and_no_other_file(spark, table):
    _name, location, registry = table
    snapshot = open_snapshot(location, [dt.date(2026, 11, 1)])
    counter = IoCounter()
    columns = ["d3", "s2"]
    frames = [read_row_groups(f, snapshot, registry, columns, counter) for f in snapshot.files]
    assert counter.files_opened == [f.uri for f in snapshot.files]  # the other days' files are never opened
    wanted = {snapshot.physical[c] for c in columns}
    on_disk = 0
    for f in snapshot.files:
        meta = pq.read_metadata(f.uri.removeprefix("file://"))
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                on_disk += chunk.total_compressed_size if chunk.path_in_schema.split(".")[0] in wanted else 0
    assert sum(t.num_rows for t in frames) == ROWS
    assert on_disk <= counter.bytes_read <= 1.10 * on_disk, (counter.bytes_read, on_disk)


def test_values_match_spark_including_renamed_and_later_added_features(spark, table):
    name, location, registry = table
    columns = ["d1_renamed", "late", "s0"]
    snapshot = open_snapshot(location, [dt.date(2026, 11, 1), dt.date(2026, 11, 3)])
    counter = IoCounter()
    got = {}
    for f in snapshot.files:
        frame = read_row_groups(f, snapshot, registry, ["impression_id", *columns], counter).to_pydict()
        for i, key in enumerate(frame["impression_id"]):
            got[(f.ds, key)] = tuple(frame[c][i] for c in columns)
    expected = {
        (r.ds, r.impression_id): (r.d1_renamed, 7.5 if r.ds == DAYS[0] else r.late, r.s0)
        for r in spark.table(name).where(f"ds IN ('{DAYS[0]}', '{DAYS[2]}')").collect()
    }
    assert len(got) == 2 * ROWS
    assert got.keys() == expected.keys()
    mismatched = [k for k, v in expected.items() if not (np.float32(v[0]) == np.float32(got[k][0])
                  and np.float32(v[1]) == np.float32(got[k][1]) and list(v[2]) == list(got[k][2]))]  # fmt: skip
    assert mismatched == []


def test_a_truncated_data_file_fails_naming_it(spark, table, tmp_path):
    _name, location, registry = table
    snapshot = open_snapshot(location, [dt.date(2026, 11, 2)])
    original = snapshot.files[0]
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(open(original.uri.removeprefix("file://"), "rb").read()[:5000])
    with pytest.raises(TableError, match=r"data file .*broken\.parquet \(ds=2026-11-02\) is corrupt or truncated"):
        read_row_groups(replace(original, uri=str(broken)), snapshot, registry, ["d3"], IoCounter())
