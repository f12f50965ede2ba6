"""Write-audit-publish: only a partition that passed the quality gate is published, in one commit.

Real Spark, Delta and Great Expectations. The kill test runs the label join in its own process
(its own JVM and data folder, since embedded Derby admits one JVM) and reads the result with the
``deltalake`` package, which needs no JVM.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable

from etl import label_join
from etl.maintenance import publish
from ingest.snapshot import open_snapshot
from schemas.catalog import QUALITY_GATE, catalog_table
from schemas.errors import DataRefusedError, TableError
from tests.conftest import SMALL_REGISTRY, dataset_name, write_landing
from tests.etl.test_label_join import DAY1, DAY2, close_label_days, imp

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parent.parent.parent
GATED = SMALL_REGISTRY.replace("default: 0.0, description: ctr", "default: 0.0, quality: {{range: [0, 1]}}, description: ctr")


@pytest.fixture
def gated(request, tmp_path):
    """A registry whose user_ctr_7d must lie in [0, 1]; returns (registry_dir, dataset)."""
    directory = tmp_path / "registry"
    directory.mkdir()
    dataset = dataset_name(request)
    (directory / f"{dataset}.yaml").write_text(GATED.format(dataset=dataset))
    return directory, dataset


def land_day(landing: Path, ds: str, n: int = 20, ctr: float = 0.5) -> None:
    records = [{**imp(f"{ds}-{i}", f"{ds}T0{i % 10}:00:00Z"), "dense": {"user_ctr_7d": ctr, "item_price": 1.0}}
               for i in range(n)]  # fmt: skip
    folder = landing / "impressions" / f"ds={ds}" / "hour=00"
    if folder.exists():
        for old in folder.glob("*.jsonl"):
            old.unlink()
    write_landing(landing, "impressions", ds, records)


def config(tmp_path: Path, registry_dir: Path, dataset: str, ds: str) -> label_join.LabelJoinConfig:
    return label_join.LabelJoinConfig(dataset=dataset, ds=dt.date.fromisoformat(ds), home=tmp_path,
                                      landing=str(tmp_path / "landing"), registry_dir=registry_dir)  # fmt: skip


def version(spark, table: str) -> int:
    return DeltaTable.forName(spark, table).history(1).first()["version"]


def gate_rows(spark, dataset: str) -> list:
    return spark.table(catalog_table(QUALITY_GATE)).where(f"dataset = '{dataset}'").orderBy("decided_at").collect()


def test_a_failing_partition_is_not_published_until_forced_and_the_force_is_recorded(spark, tmp_path, gated):
    registry_dir, dataset = gated
    landing = tmp_path / "landing"
    land_day(landing, DAY1)
    close_label_days(landing, DAY1, 4)
    first = label_join.run(spark, config(tmp_path, registry_dir, dataset, DAY1))
    table = first.table
    published = version(spark, table)
    good_rows = spark.table(table).collect()

    land_day(landing, DAY1, ctr=5.0)  # a logger bug: every ctr out of its declared range
    with pytest.raises(DataRefusedError, match="failed 1 of .* quality expectations and was not published") as refused:
        label_join.run(spark, config(tmp_path, registry_dir, dataset, DAY1))

    assert version(spark, table) == published  # not a single commit
    assert sorted(spark.table(table).collect()) == sorted(good_rows)
    assert "FAILED expect_column_values_to_be_between user_ctr_7d (declared range): 20 of 20 rows unexpected" in (
        refused.value.details
    )
    assert "NOT PUBLISHED" in refused.value.details
    refusal = gate_rows(spark, dataset)[-1]
    assert (refusal.decision, refusal.table_version, refusal.rows) == ("refused", None, 20)
    assert spark.table(refusal.staging_table).where("user_ctr_7d = 5.0").count() == 20  # kept for inspection
    report = json.loads(Path(refusal.report_path).read_text())
    failed = [c for c in report["checks"] if not c["success"]]
    assert [(c["expectation"], c["column"]) for c in failed] == [("expect_column_values_to_be_between", "user_ctr_7d")]

    with pytest.raises(DataRefusedError, match="still fails 1 of"):  # validated again: still bad
        publish.run(spark, publish.PublishConfig(dataset=dataset, ds=dt.date.fromisoformat(DAY1), home=tmp_path,
                                                 registry_dir=registry_dir))  # fmt: skip
    assert version(spark, table) == published

    forced = publish.run(spark, publish.PublishConfig(
        dataset=dataset, ds=dt.date.fromisoformat(DAY1), home=tmp_path, registry_dir=registry_dir, force=True,
        reason="ctr rescaled on purpose", by="alice",
    ))  # fmt: skip
    assert forced.version == published + 1
    assert spark.table(table).where("user_ctr_7d = 5.0").count() == 20 and spark.table(table).count() == 20
    entry = gate_rows(spark, dataset)[-1]
    assert (entry.decision, entry.decided_by, entry.reason, entry.table_version, entry.run_id) == (
        "forced", "alice", "ctr rescaled on purpose", published + 1, refusal.run_id)
    assert entry.failed_expectations == refusal.failed_expectations and len(entry.failed_expectations) == 1
    assert not spark.catalog.tableExists(refusal.staging_table)  # published: the staging table is dropped

    with pytest.raises(TableError, match="was already forced"):
        publish.run(spark, publish.PublishConfig(dataset=dataset, ds=dt.date.fromisoformat(DAY1), home=tmp_path,
                                                 force=True, reason="again"))  # fmt: skip


def test_force_needs_a_reason_and_names_are_checked():
    from schemas.errors import ConfigError, InvalidNameError

    with pytest.raises(ConfigError, match="--force needs --reason"):
        publish.PublishConfig(dataset="ads", ds=dt.date(2026, 11, 1), home=Path("."), force=True)
    for hostile in ("../x", "a; DROP TABLE b"):
        with pytest.raises(InvalidNameError, match="dataset name .* is not allowed"):
            publish.PublishConfig(dataset=hostile, ds=dt.date(2026, 11, 1), home=Path("."))
        with pytest.raises(InvalidNameError, match="dataset name .* is not allowed"):
            label_join.LabelJoinConfig(dataset=hostile, ds=dt.date(2026, 11, 1), home=Path("."))
    with pytest.raises(ConfigError, match="is not a run id"):
        publish.PublishConfig(dataset="ads", ds=dt.date(2026, 11, 1), home=Path("."), run_id="x; DROP TABLE b")


def _failures(results: list) -> list[str]:
    return [f"{type(r).__name__}: {str(r).strip().splitlines()[0][:500]}" for r in results if isinstance(r, Exception)]


def _run_all(jobs) -> list:
    """Run each callable in its own thread at once; return results or exceptions, in order."""
    results: list = [None] * len(jobs)

    def body(i, job):
        try:
            results[i] = job()
        except Exception as err:  # noqa: BLE001 - reported by the test
            results[i] = err

    threads = [threading.Thread(target=body, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return results


def test_concurrent_label_joins_both_succeed_and_never_duplicate_rows(spark, tmp_path, gated):
    registry_dir, dataset = gated
    landing = tmp_path / "landing"
    for ds in (DAY1, DAY2):
        land_day(landing, ds, n=30)
    close_label_days(landing, DAY1, 5)

    # Two days at once, on a table neither has created yet.
    different = _run_all([lambda ds=ds: label_join.run(spark, config(tmp_path, registry_dir, dataset, ds))
                          for ds in (DAY1, DAY2)])  # fmt: skip
    assert not _failures(different)
    table = different[0].table
    counts = {r.ds: r["count"] for r in spark.table(table).groupBy("ds").count().collect()}
    assert counts == {DAY1: 30, DAY2: 30}

    # The same day twice at once: each replaces the whole ds, so it holds one copy whichever lands last.
    same = _run_all([lambda: label_join.run(spark, config(tmp_path, registry_dir, dataset, DAY1))] * 2)
    assert not _failures(same)
    day1 = spark.table(table).where(f"ds = '{DAY1}'")
    assert day1.count() == 30 and day1.select("impression_id").distinct().count() == 30
    # and each ds's catalog statistics are one copy of one run's rows
    features = len(same[0].stats.features)
    stats = spark.table("featurehouse_catalog.feature_stats").where(f"dataset = '{dataset}'")
    assert {r.ds: r["count"] for r in stats.groupBy("ds").count().collect()} == {DAY1: features, DAY2: features}
    assert spark.table(table).count() == 60
    decisions = [r.decision for r in gate_rows(spark, dataset)]
    assert decisions == ["published"] * 4


def _delta_version(path: Path) -> int:
    from deltalake import DeltaTable as LogTable

    return LogTable(str(path)).version()


def _parquet_files(path: Path) -> set[Path]:
    return {p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


@pytest.mark.slow
def test_a_label_join_killed_mid_publish_leaves_the_table_intact_and_a_rerun_completes(tmp_path, gated):
    from deltalake import DeltaTable as LogTable

    registry_dir, dataset = gated
    home = tmp_path / "home"
    landing = home / "landing"
    land_day(landing, DAY1, n=2000)
    close_label_days(landing, DAY1, 4)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    command = [str(Path(sys.executable).parent / "featurehouse"), "label-join", "--dataset", dataset, "--ds", DAY1,
               "--home", str(home), "--registry-dir", str(registry_dir), "--engine", "off",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]  # fmt: skip
    table_dir = home / "warehouse" / "featurehouse.db" / dataset

    for _attempt in range(3):
        # The last published version: the run creates the table empty (version 0) before anything else.
        known = (table_dir / "_delta_log").exists()
        before_version = _delta_version(table_dir) if known else 0
        before_rows = LogTable(str(table_dir)).to_pyarrow_table().num_rows if known else 0
        files_before = _parquet_files(table_dir) if known else set()
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and not (
            table_dir.exists() and _parquet_files(table_dir) - files_before
        ):
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-publish
        proc.wait()
        if _parquet_files(table_dir) - files_before and _delta_version(table_dir) == before_version:
            break  # killed after its data files were written, before its commit: the case under test
    else:
        pytest.fail("could not kill the label join between writing its files and committing them in 3 tries")

    intact = LogTable(str(table_dir))
    assert intact.version() == before_version
    assert intact.to_pyarrow_table().num_rows == before_rows  # the orphan files are not part of any version

    rerun = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _delta_version(table_dir) == before_version + 1
    snapshot = open_snapshot(str(table_dir), [dt.date.fromisoformat(DAY1)])  # the reader's view: physical names
    ids = [i for f in snapshot.files
           for i in pq.read_table(f.uri, columns=[snapshot.physical["impression_id"]]).column(0).to_pylist()]  # fmt: skip
    assert len(ids) == len(set(ids)) == 2000  # one copy of the day, not the killed run's plus the rerun's
