"""Retention: expired partitions are listed (dry run), dropped and vacuumed (--apply), nothing else (real Spark)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from etl.maintenance import retention
from etl.records.quarantine import SCHEMA as QUARANTINE_SCHEMA
from ingest.projected_reads import IoCounter, read_row_groups
from ingest.snapshot import open_snapshot
from schemas.errors import ConfigError, TableError
from schemas.registry import load_dataset
from schemas.spark import table_schema
from tests.conftest import SMALL_REGISTRY, dataset_name
from warehouse.evolution import create_table

pytestmark = pytest.mark.spark

AS_OF = "2026-11-05"  # with retention 2d: cutoff 2026-11-03, so ds 2026-11-01 and 2026-11-02 expire
ROWS = {"2026-11-01": 3, "2026-11-02": 4, "2026-11-03": 2, "2026-11-04": 5}
QUARANTINED = {"2026-11-02": 2, "2026-11-04": 1}
EXPIRED = ["2026-11-01", "2026-11-02"]


def feature_rows(ds: str, n: int) -> list[tuple]:
    event_time = dt.datetime.fromisoformat(f"{ds}T10:00:00")
    return [(f"{ds}-{i}", i, 100 + i, event_time, i % 2, 0, 0.1 * i, 2.0, [i], [(i, 0.5)], ds) for i in range(n)]


def quarantined_rows(ds: str, n: int) -> list[tuple]:
    now = dt.datetime(2026, 11, 6)
    return [("impressions", "f.jsonl", 0, i + 1, "{", "not_json", "not JSON", "run", now, ds) for i in range(n)]


@pytest.fixture
def warehouse(spark, request, registry_dir: Path) -> tuple[Path, str]:
    """A dataset with `retention: 2d`, its feature table (4 partitions) and quarantine table (2 partitions); a
    dataset without retention; one with a retention but no table. -> (registry_dir, dataset)."""
    dataset = dataset_name(request)[:48].rstrip("_")
    (registry_dir / f"{dataset_name(request)}.yaml").unlink()
    for name, extra in ((dataset, "retention: 2d"), (f"{dataset}_forever", ""), (f"{dataset}_new", "retention: 30d")):
        (registry_dir / f"{name}.yaml").write_text(SMALL_REGISTRY.format(dataset=name) + extra)
    registry = load_dataset(dataset, registry_dir)
    table, quarantine = f"featurehouse.{dataset}", f"featurehouse_quarantine.{dataset}"
    create_table(spark, registry, table)  # as the label join creates it: column mapping, partitioned by ds
    rows = [row for ds, n in ROWS.items() for row in feature_rows(ds, n)]
    spark.createDataFrame(rows, table_schema(registry)).writeTo(table).append()
    spark.sql("CREATE DATABASE IF NOT EXISTS featurehouse_quarantine")
    DeltaTable.createIfNotExists(spark).tableName(quarantine).addColumns(QUARANTINE_SCHEMA).partitionedBy(
        "ds").execute()  # fmt: skip
    spark.createDataFrame(
        [row for ds, n in QUARANTINED.items() for row in quarantined_rows(ds, n)], QUARANTINE_SCHEMA
    ).writeTo(quarantine).append()
    return registry_dir, dataset


def version(spark, table: str) -> int:
    return DeltaTable.forName(spark, table).history(1).first()["version"]


def counts(spark, table: str) -> dict[str, int]:
    return {r.ds: r["count"] for r in spark.table(table).groupBy("ds").count().collect()}


def cli(capsys, registry_dir: Path, tmp_path: Path, *args: str) -> str:
    """Run ``featurehouse retention`` as the DAG does; return its summary (stdout)."""
    status = retention.main([*args, "--as-of", AS_OF, "--home", str(tmp_path), "--registry-dir", str(registry_dir)])
    out, err = capsys.readouterr()
    assert status == 0, err
    print(out)  # shown with pytest -s
    return out


def test_a_dry_run_lists_exactly_the_expired_partitions_and_writes_nothing(spark, warehouse, tmp_path, capsys):
    registry_dir, dataset = warehouse
    tables = (f"featurehouse.{dataset}", f"featurehouse_quarantine.{dataset}")
    before = {t: (version(spark, t), sorted(spark.table(t).collect())) for t in tables}

    out = cli(capsys, registry_dir, tmp_path)  # no --dataset: every registry file of the folder

    assert {t: (version(spark, t), sorted(spark.table(t).collect())) for t in tables} == before
    assert f"retention as of {AS_OF} (dry run: nothing written; --apply drops and vacuums)" in out
    assert f"{dataset}: retention 2d, cutoff 2026-11-03 (ds < 2026-11-03 expire)" in out
    assert (f"would drop 2 partitions (ds 2026-11-01 .. 2026-11-02, 7 rows) from featurehouse.{dataset} "
            f"(Delta version {before[tables[0]][0]}); 2 partitions kept (ds 2026-11-03 .. 2026-11-04)") in out
    assert (f"would drop 1 partitions (ds 2026-11-02 .. 2026-11-02, 2 rows) from featurehouse_quarantine.{dataset}"
            in out)  # fmt: skip
    listed = [line.strip() for line in out.splitlines() if line.strip().startswith("ds=")]
    assert listed == ["ds=2026-11-01: 3 rows", "ds=2026-11-02: 4 rows", "ds=2026-11-02: 2 rows"]
    assert f"{dataset}_forever: no retention set, partitions kept forever (skipped)" in out
    assert f"featurehouse.{dataset}_new: no table" in out
    assert "would drop 3 partitions, 9 rows, from 2 tables" in out


def test_apply_drops_exactly_the_expired_partitions_and_a_second_apply_commits_nothing(
    spark, warehouse, tmp_path, capsys
):
    registry_dir, dataset = warehouse
    table, quarantine = f"featurehouse.{dataset}", f"featurehouse_quarantine.{dataset}"
    kept_rows = sorted(spark.table(table).where("ds >= '2026-11-03'").collect())
    versions = {t: version(spark, t) for t in (table, quarantine)}

    out = cli(capsys, registry_dir, tmp_path, "--dataset", dataset, "--apply")

    assert counts(spark, table) == {"2026-11-03": 2, "2026-11-04": 5}
    assert sorted(spark.table(table).collect()) == kept_rows  # partitions >= cutoff untouched
    assert counts(spark, quarantine) == {"2026-11-04": 1}
    assert {t: version(spark, t) for t in versions} == {t: v + 1 for t, v in versions.items()}  # one commit each
    (commit,) = DeltaTable.forName(spark, table).history(1).collect()
    assert commit.operation == "DELETE" and commit.operationMetrics["numAddedFiles"] == "0"  # no file rewritten
    assert (f"dropped 2 partitions (ds 2026-11-01 .. 2026-11-02, 7 rows) from {table} (Delta version "
            f"{versions[table]} -> {versions[table] + 1}); 2 partitions kept (ds 2026-11-03 .. 2026-11-04)") in out
    assert "vacuum: deleted 0 files now (files removed less than 1 week ago stay for readers of older versions)" in out
    assert "dropped 3 partitions, 9 rows, from 2 tables" in out
    assert "_forever" not in out  # only the dataset named

    again = cli(capsys, registry_dir, tmp_path, "--dataset", dataset, "--apply")
    assert {t: version(spark, t) for t in versions} == {t: v + 1 for t, v in versions.items()}
    assert f"nothing to drop from {table} (Delta version {versions[table] + 1} -> {versions[table] + 1})" in again
    assert "dropped 0 partitions, 0 rows, from 0 tables" in again


def test_a_reader_pinned_before_retention_still_reads_the_dropped_partitions(spark, warehouse, tmp_path):
    registry_dir, dataset = warehouse
    table = f"featurehouse.{dataset}"
    registry = load_dataset(dataset, registry_dir)
    location = spark.sql(f"DESCRIBE DETAIL {table}").first()["location"]
    days = [dt.date.fromisoformat(d) for d in EXPIRED]
    pinned = version(spark, table)
    expected = sorted(r.impression_id for r in spark.table(table).where(F.col("ds").isin(EXPIRED)).collect())
    config = retention.RetentionConfig(home=tmp_path, datasets=(dataset,), as_of=dt.date.fromisoformat(AS_OF),
                                       apply=True, registry_dir=registry_dir)  # fmt: skip

    def read_pinned() -> list[str]:
        snapshot = open_snapshot(location, days, version=pinned)
        assert snapshot.missing_days == () and snapshot.rows == len(expected)
        ids = [read_row_groups(f, snapshot, registry, ["impression_id"], IoCounter()).column(0).to_pylist()
               for f in snapshot.files]  # fmt: skip
        return sorted(i for part in ids for i in part)

    retention.run(spark, config)  # dropped, then vacuumed with the default retention (7 days)
    assert open_snapshot(location, days).missing_days == tuple(EXPIRED)  # gone from the latest version
    assert read_pinned() == expected == sorted(f"{ds}-{i}" for ds in EXPIRED for i in range(ROWS[ds]))

    # The vacuum honours the table's own retention: at 0 hours the dropped files go at once, and then so
    # does the pinned snapshot (which is what the default 7 days protects).
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 0 hours')")
    dropped_files = len(open_snapshot(location, days, version=pinned).files)
    vacuumed = retention.run(spark, config).datasets[0].tables[0]
    assert vacuumed.expired == () and vacuumed.vacuum_files == dropped_files > 0
    assert DeltaTable.forName(spark, table).history(1).first()["operation"] == "VACUUM END"
    with pytest.raises(TableError, match=r"cannot open data file .*removed by hand or the table is being vacuumed"):
        read_pinned()


def test_bad_inputs_are_refused_before_spark_starts(registry_dir, tmp_path, capsys):
    dataset = next(registry_dir.glob("*.yaml")).stem  # SMALL_REGISTRY: no retention
    args = ["--home", str(tmp_path), "--registry-dir", str(registry_dir)]
    assert retention.main(["--dataset", dataset, *args]) == 2
    err = capsys.readouterr().err
    assert f"error: dataset {dataset!r} has no retention: {registry_dir / dataset}.yaml sets no 'retention:'" in err
    assert "add e.g. `retention: 365d` to that file" in err

    assert retention.main(["--as-of", "2026-13-01", *args]) == 2
    assert "error: --as-of '2026-13-01' is not a date; write it as YYYY-MM-DD" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_:
        retention.parse_args(["--dry-run", "--apply", *args])
    assert exit_.value.code == 2
    assert "argument --apply: not allowed with argument --dry-run" in capsys.readouterr().err

    with pytest.raises(ConfigError, match="has no retention"):
        retention.parse_args(["--dataset", dataset, *args])
    (registry_dir / "other.yaml").write_text(SMALL_REGISTRY.format(dataset="other") + "retention: 400d")
    twice = retention.parse_args(["--dataset", "other", "--dataset", "other", *args])
    assert [r.dataset for r in retention.chosen_registries(twice)] == ["other"]
    assert retention.parse_args(args).apply is False  # a dry run unless --apply
    assert retention.parse_args(args).as_of == dt.datetime.now(dt.UTC).date()
