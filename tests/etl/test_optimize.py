"""optimize --order popularity: columns ordered by the catalog's popularity, partitions rewritten to follow it with
every row and value kept, a reader pinned before it still reads, a second run writes nothing (real Spark)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable

from etl.maintenance import optimize
from ingest.projected_reads import IoCounter, read_row_groups
from ingest.snapshot import open_snapshot
from schemas.errors import ConfigError, TableError
from schemas.registry import load_dataset
from schemas.spark import table_schema
from tests.conftest import SMALL_REGISTRY
from warehouse.catalog import ensure_catalog, sync_features
from warehouse.evolution import create_table

pytestmark = pytest.mark.spark

DATASET = "t_optimize"
TABLE = f"featurehouse.{DATASET}"
DAYS = ("2026-11-01", "2026-11-02")
ROWS = 150  # per partition
KEYS_AND_LABELS = ["impression_id", "user_id", "item_id", "event_time", "label_click", "label_conversion"]
REGISTRY_ORDER = ["user_ctr_7d", "item_price", "user_topic_ids", "user_topic_affinity"]
# job a reads the affinity and the price, job b the affinity: affinity (2 jobs), price (1), then registry order
USAGE = {"job-a": ["user_topic_affinity", "item_price"], "job-b": ["user_topic_affinity"]}
POPULAR_ORDER = ["user_topic_affinity", "item_price", "user_ctr_7d", "user_topic_ids"]
FEATURES = sorted(REGISTRY_ORDER)


def feature_rows(ds: str) -> list[tuple]:
    event_time = dt.datetime.fromisoformat(f"{ds}T10:00:00")
    return [(f"{ds}-{i}", i, 100 + i, event_time + dt.timedelta(seconds=i), i % 2, int(i % 7 == 0),
             None if i % 5 == 0 else 0.01 * i, 1.5 * i, [i, i + 1][: i % 3], [(i, 0.25 * i)] if i % 4 else None, ds)
            for i in range(ROWS)]  # fmt: skip


def usage_rows() -> list[dict]:
    """What the reader records of a run (``ingest/usage.py``); the cost columns left null."""
    now = dt.datetime.now()
    return [{"run_id": f"run-{job}", "job_id": job, "dataset": DATASET, "ds_from": DAYS[0], "ds_to": DAYS[-1],
             "features": features, "bytes_read": 1, "rows_read": 1, "table_version": 1, "started_at": now,
             "ended_at": now} for job, features in USAGE.items()]  # fmt: skip


def columns_of_files(location: str, version: int | None = None) -> dict[str, list[list[str]]]:
    """Per ds, the logical columns of each data file, in the order of its Parquet footer."""
    snapshot = open_snapshot(location, [dt.date.fromisoformat(d) for d in DAYS], version=version)
    logical = {physical: name for name, physical in snapshot.physical.items()}
    out: dict[str, list[list[str]]] = {}
    for file in snapshot.files:
        names = pq.read_schema(file.uri.removeprefix("file://")).names
        out.setdefault(file.ds, []).append([logical[n] for n in names if logical[n] != "ds"])
    return out


def read_pinned(location: str, version: int, registry) -> pa.Table:
    """Every row's keys and features of the version, read by the JVM-free reader, sorted by impression id."""
    snapshot = open_snapshot(location, [dt.date.fromisoformat(d) for d in DAYS], version=version)
    parts = [read_row_groups(f, snapshot, registry, ["impression_id", *FEATURES], IoCounter()) for f in snapshot.files]
    return pa.concat_tables(parts).sort_by("impression_id")


def rows_by_id(frame) -> dict[str, dict]:
    return {r["impression_id"]: r.asDict(recursive=True) for r in frame.collect()}


def version(spark) -> int:
    return DeltaTable.forName(spark, TABLE).history(1).first()["version"]


@pytest.fixture(scope="module")
def optimized(spark, spark_home: Path, tmp_path_factory: pytest.TempPathFactory):
    """The table (2 partitions of 150 rows, 2 files each, in registry order), then: optimize with no usage yet, a
    dry run and a run once two jobs read it, and a second run. -> what each saw."""
    registry_dir = tmp_path_factory.mktemp("optimize_registry")
    (registry_dir / f"{DATASET}.yaml").write_text(SMALL_REGISTRY.format(dataset=DATASET))
    registry = load_dataset(DATASET, registry_dir)
    create_table(spark, registry, TABLE)  # as the label join creates it: column mapping, partitioned by ds
    rows = [row for ds in DAYS for row in feature_rows(ds)]
    spark.createDataFrame(rows, table_schema(registry)).repartition(2).writeTo(TABLE).append()
    ensure_catalog(spark)
    sync_features(spark, registry)
    location = spark.sql(f"DESCRIBE DETAIL {TABLE}").first()["location"]
    args = ["--dataset", DATASET, "--home", str(spark_home), "--registry-dir", str(registry_dir)]

    def run(*extra: str) -> str:
        """``featurehouse optimize`` as the DAG runs it: its progress and summary."""
        text = io.StringIO()
        with contextlib.redirect_stderr(text), contextlib.redirect_stdout(text):
            status = optimize.main([*args, *extra])
        assert status == 0, text.getvalue()
        return text.getvalue()

    out = {"registry": registry, "location": location, "args": args, "registry_dir": registry_dir}
    out["before"] = version(spark)
    out["no_usage"] = run()
    out["after_no_usage"] = version(spark)
    spark.createDataFrame(usage_rows(), spark.table("featurehouse_catalog.feature_usage").schema).writeTo(
        "featurehouse_catalog.feature_usage").append()  # fmt: skip
    out["pinned"] = version(spark)  # what a training job pinned before the optimize
    out["files_before"] = columns_of_files(location, out["pinned"])
    out["rows_before"] = rows_by_id(spark.read.option("versionAsOf", out["pinned"]).table(TABLE).select(
        *KEYS_AND_LABELS, *FEATURES, "ds"))  # fmt: skip
    out["pinned_read_before"] = read_pinned(location, out["pinned"], registry)
    out["dry_run"] = run("--dry-run")
    out["after_dry_run"] = version(spark)
    out["first"] = optimize.run(spark, optimize.parse_args([*args, "--from", DAYS[0], "--to", DAYS[-1]]))
    out["after_first"] = version(spark)
    out["second"] = run("--from", DAYS[0])
    print(*(out[k] for k in ("no_usage", "dry_run")), out["first"].format(), out["second"], sep="\n")  # with -s
    out["after_second"] = version(spark)
    return out


def test_no_usage_or_a_dry_run_changes_nothing(optimized):
    assert optimized["after_no_usage"] == optimized["before"]
    assert f"{TABLE}: no usage of {DATASET} in featurehouse_catalog.feature_popularity" in optimized["no_usage"]
    assert "no job read a feature of t_optimize in the last 30 days" in optimized["no_usage"]
    assert optimized["after_dry_run"] == optimized["pinned"]
    assert "column order: would move 2 columns (metadata only): user_topic_affinity, item_price" in optimized["dry_run"]
    assert f"ds={DAYS[1]}: would rewrite (2 of 2 files out of order)" in optimized["dry_run"]


def test_optimize_orders_the_columns_by_popularity_and_rewrites_each_partition_in_one_commit(spark, optimized):
    first, pinned = optimized["first"], optimized["pinned"]
    assert spark.table(TABLE).columns == [*KEYS_AND_LABELS, *POPULAR_ORDER, "ds"]
    # the Parquet footers: before, every file in registry order; after, every file in popularity order
    assert optimized["files_before"] == {ds: [[*KEYS_AND_LABELS, *REGISTRY_ORDER]] * 2 for ds in DAYS}
    after = columns_of_files(optimized["location"])
    assert sorted(after) == list(DAYS) and [p.files_after for p in first.partitions] == [len(after[ds]) for ds in DAYS]
    assert all(columns == [*KEYS_AND_LABELS, *POPULAR_ORDER] for files in after.values() for columns in files)
    # two metadata moves (affinity after the labels, then the price after it), then one WRITE per partition
    history = DeltaTable.forName(spark, TABLE).history().where(f"version > {pinned}").orderBy("version").collect()
    assert [(h.operation, h.operationParameters.get("position")) for h in history] == [
        ("CHANGE COLUMN", "AFTER label_conversion"), ("CHANGE COLUMN", "AFTER user_topic_affinity"),
        ("WRITE", None), ("WRITE", None)]  # fmt: skip
    assert [h.operationMetrics["numOutputRows"] for h in history[2:]] == [str(ROWS)] * 2
    assert [p.version for p in first.partitions] == [pinned + 3, pinned + 4]
    assert first.moved == ("user_topic_affinity", "item_price") and first.versions == (pinned, pinned + 4)
    text = first.format()
    assert "most read first (jobs in 30 days): user_topic_affinity (2), item_price (1)" in text
    assert "column order: moved 2 columns (metadata only): user_topic_affinity, item_price" in text
    assert (f"ds={DAYS[0]}: {ROWS} rows rewritten, 2 -> {first.partitions[0].files_after} files, Delta version "
            f"{pinned + 3}; rows and checksum identical, files in order, the version before's files kept") in text
    assert "statistics: the first 32 columns (impression_id, user_id, item_id, ... user_topic_ids)" in text
    assert f"2 partitions rewritten, 0 already in order; Delta version {pinned} -> {pinned + 4}" in text


def test_optimize_keeps_every_row_and_value_of_the_pre_optimize_snapshot(spark, optimized):
    after = rows_by_id(spark.table(TABLE).select(*KEYS_AND_LABELS, *FEATURES, "ds"))
    assert len(after) == 2 * ROWS
    assert after == optimized["rows_before"]  # every row, every value, exactly (nulls, lists, structs included)


def test_a_reader_pinned_before_optimize_still_reads_the_same_rows(optimized):
    pinned = read_pinned(optimized["location"], optimized["pinned"], optimized["registry"])
    assert pinned.num_rows == 2 * ROWS
    assert pinned.equals(optimized["pinned_read_before"])
    latest = read_pinned(optimized["location"], optimized["after_first"], optimized["registry"])
    assert latest.equals(pinned)  # and the rewritten files read the same through the reader


def test_a_second_run_finds_the_order_in_place_and_writes_nothing(optimized):
    assert optimized["after_second"] == optimized["after_first"]
    second, files = optimized["second"], [p.files_after for p in optimized["first"].partitions]
    assert "column order: already in popularity order" in second
    assert f"ds={DAYS[0]}: {files[0]} files already in order, nothing written" in second
    assert f"ds={DAYS[1]}: {files[1]} files already in order, nothing written" in second
    assert "0 partitions rewritten, 2 already in order" in second


def test_a_range_without_partitions_or_reversed_is_refused_before_spark(optimized):
    args = optimized["args"]
    with pytest.raises(TableError, match=rf"{TABLE} has no partition in ds 2027-01-01 .. 2027-01-07 \(its 2 "
                                         rf"partitions are ds {DAYS[0]} .. {DAYS[-1]}\); choose --from/--to"):  # fmt: skip
        optimize.parse_args([*args, "--from", "2027-01-01", "--to", "2027-01-07"]).check_inputs()  # no JVM needed
    with pytest.raises(ConfigError, match="--to 2026-11-01 is before --from 2026-11-02"):
        optimize.parse_args([*args, "--from", "2026-11-02", "--to", "2026-11-01"])
