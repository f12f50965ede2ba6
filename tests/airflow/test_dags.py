"""The featurehouse DAGs under real Airflow 3: parsed by a DagBag, run by ``airflow dags test`` and by a
real scheduler with the LocalExecutor, on the embedded set-up: each Spark task a client of the warehouse's engine,
run in the task's own process.

One generated landing zone (the impressions of 2026-11-02, their labels through 11-05) and one
warehouse folder are shared by the module; each Airflow deployment gets its own metadata database.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from etl.generate.job import GenerateConfig
from warehouse.engine.client import running_engine
from warehouse.engine.state import EngineFiles
from warehouse.processes import free_ports
from etl.generate.job import run as generate

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "airflow_dags"
DS = "2026-11-02"
LAST_LABEL_DAY = "2026-11-05"  # ds + 3 days: where ads' 3-day conversion window of the ds closes
SPARK_DAGS = ("featurehouse_daily", "featurehouse_streaming", "featurehouse_retention")


@dataclass
class Airflow:
    """One Airflow deployment: its own home (metadata DB, logs) over the module's warehouse folder."""

    home: Path
    env: dict[str, str]

    def cli(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "airflow", *args], cwd=REPO, env={**self.env, **(env or {})},
                              text=True, capture_output=True, timeout=timeout, check=False)  # fmt: skip

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "airflow", *args], cwd=REPO, env=self.env, text=True,
                                start_new_session=True, **kw)  # fmt: skip

    def query(self, sql: str, *params) -> list[tuple]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            return db.execute(sql, params).fetchall()

    def states(self, dag_id: str) -> dict[str, tuple[str, int]]:
        """task id -> (state, try number) in the latest run of ``dag_id``."""
        rows = self.query(
            "select task_id, state, try_number from task_instance where dag_id = ? and run_id = "
            "(select run_id from dag_run where dag_id = ? order by id desc limit 1)", dag_id, dag_id,
        )  # fmt: skip
        return {task: (state, tries) for task, state, tries in rows}


def make_airflow(home: Path, warehouse: Path, **env: str) -> Airflow:
    """``airflow db migrate``, the featurehouse pool and connection (``airflow_dags.setup``), the DAGs serialized."""
    home.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FEATUREHOUSE_"))}
    airflow = Airflow(home, {
        **base,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW_VAR_FEATUREHOUSE_HOME": str(warehouse),
        "FEATUREHOUSE_SENSOR_POKE_S": "1",
        "FEATUREHOUSE_RETRY_DELAY_S": "1",  # a task that fails its first try (a slow start) retries at once
        "FEATUREHOUSE_ENGINE_IDLE_MINUTES": "10",  # an engine a killed test leaves stops itself
        **env,
    })  # fmt: skip
    for step in (["-m", "airflow", "db", "migrate"], ["-m", "airflow_dags.setup"], ["-m", "airflow", "dags", "reserialize"]):
        done = subprocess.run([sys.executable, *step], cwd=REPO, env=airflow.env, text=True, capture_output=True,
                              timeout=180, check=False)  # fmt: skip
        assert done.returncode == 0, f"{' '.join(step)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return airflow


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module's data folder; the engine its tasks start is stopped after the module."""
    home = tmp_path_factory.mktemp("airflow_warehouse")
    generate(GenerateConfig(home=home, start=dt.date.fromisoformat(DS), days=1, impressions_per_day=3000))
    assert (home / "landing" / "labels" / f"ds={LAST_LABEL_DAY}" / "_SUCCESS").exists()
    yield home
    subprocess.run([str(Path(sys.executable).parent / "featurehouse"), "engine", "stop", "--home", str(home)],
                   capture_output=True, timeout=120, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, warehouse: Path) -> Airflow:
    """The deployment the ``airflow dags test`` runs share (each such run replaces an earlier one of its date)."""
    return make_airflow(tmp_path_factory.mktemp("airflow") / "home", warehouse)


@pytest.fixture(scope="module")
def published() -> dict[str, int]:
    """What the first daily run published, for the runs after it."""
    return {}


def _partition(spark, warehouse: Path, ds: str):
    return spark.read.format("delta").load(str(warehouse / "warehouse" / "featurehouse.db" / "ads")).where(f"ds = '{ds}'")


def _one_copy(spark, warehouse: Path, ds: str) -> int:
    rows = _partition(spark, warehouse, ds)
    count, distinct = rows.count(), rows.select("impression_id").distinct().count()
    assert count == distinct > 0, f"ds {ds}: {count} rows for {distinct} impression ids"
    return count


def test_dag_files_parse_fast_without_heavy_imports_and_are_wired_as_documented(tmp_path):
    """Parsed in a fresh interpreter, as the DAG processor does: no pyspark, torch or GX, and of this repo only
    the light packages (what keeps a parse fast, where a wall-clock bound would fail on a busy machine)."""
    script = textwrap.dedent("""
        import json, sys
        from airflow.dag_processing.dagbag import DagBag
        before = set(sys.modules)
        bag = DagBag(dag_folder=sys.argv[1])
        heavy = sorted(m for m in ("pyspark", "torch", "great_expectations", "delta") if m in sys.modules)
        dag_files = {dag.fileloc for dag in bag.dags.values()}
        imported = sorted({m.split(".")[0] for m in set(sys.modules) - before if m.split(".")[0] not in
                           sys.stdlib_module_names and getattr(sys.modules[m], "__file__", None) not in dag_files})
        from airflow_dags.common import RETRIES
        dags = {}
        for dag_id, dag in bag.dags.items():
            dags[dag_id] = {
                "schedule": str(getattr(dag.timetable, "expression", None)), "catchup": dag.catchup,
                "params": {k: p.value for k, p in dag.params.items()} if dag.params else {},
                "tasks": {t.task_id: {"upstream": sorted(t.upstream_task_ids), "pool": t.pool, "retries": t.retries,
                                      "type": getattr(t, "operator_class", type(t)).__name__, "mode": getattr(t, "mode", None),
                                      "callback": bool(t.on_failure_callback),
                                      "args": getattr(t, "application_args", None)} for t in dag.tasks},
            }
        print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "heavy": heavy, "dags": dags,
                          "imported": imported, "retries": RETRIES,
                          "seconds": {s.file: s.duration.total_seconds() for s in bag.dagbag_stats}}, default=str))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    done = subprocess.run([sys.executable, "-c", script, str(DAGS)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    bag = json.loads(done.stdout.strip().splitlines()[-1])
    assert bag["errors"] == {}
    assert bag["heavy"] == []
    assert set(bag["dags"]) == {"featurehouse_daily", "featurehouse_backfill", "featurehouse_streaming",
                                "featurehouse_retention", "featurehouse_optimize"}  # fmt: skip
    assert set(bag["seconds"]) == {f"{d}.py" for d in bag["dags"]}  # common.py and setup.py are ignored
    print(f"DAG files parsed in {bag['seconds']} s")  # a figure only: no benchmark of DAG parsing exists
    # the packages a parse brings in besides the standard library: Airflow, this repo's light ones (the DAGs'
    # common module, schemas, the CLI's command table) and what the Spark provider imports; never etl, warehouse,
    # ingest or trainer, which import Spark or torch
    repo_packages = {m for m in bag["imported"] if (REPO / m / "__init__.py").exists()}
    assert repo_packages <= {"airflow_dags", "schemas", "featurehouse"}, bag["imported"]
    assert set(bag["imported"]) - repo_packages <= {"airflow", "requests", "urllib3", "charset_normalizer", "idna",
                                                    "certifi", "packaging"}, bag["imported"]  # fmt: skip

    daily, backfill = bag["dags"]["featurehouse_daily"], bag["dags"]["featurehouse_backfill"]
    streaming, retention = bag["dags"]["featurehouse_streaming"], bag["dags"]["featurehouse_retention"]
    assert (daily["schedule"], daily["catchup"]) == ("0 0 * * *", True)
    assert (streaming["schedule"], streaming["catchup"]) == ("0 * * * *", False)
    assert (retention["schedule"], retention["catchup"]) == ("0 0 * * *", False)
    assert backfill["schedule"] == "None"
    assert daily["params"] == {"dataset": "ads"} and retention["params"] == {"dry_run": True}
    assert set(backfill["params"]) == {"dataset", "feature", "start", "end"}
    optimize = bag["dags"]["featurehouse_optimize"]  # weekly, Sunday 03:00, after the daily run; one Spark task
    assert (optimize["schedule"], optimize["catchup"]) == ("0 3 * * 0", False)
    assert optimize["params"] == {"dataset": "ads", "days": 28}
    assert set(optimize["tasks"]) == {"optimize"} and optimize["tasks"]["optimize"]["type"] == "FeaturehouseJob"
    assert optimize["tasks"]["optimize"]["args"] == [
        "--dataset", "{{ params.dataset }}", "--order", "popularity",
        "--from", "{{ macros.ds_add(ds, 1 - params.days) }}", "--to", "{{ ds }}"]  # fmt: skip

    tasks = daily["tasks"]
    assert tasks["label_join"]["upstream"] == ["wait_impressions", "wait_labels"]
    assert set(tasks) == {"wait_impressions", "wait_labels", "label_join"}  # the join writes the stats: no second task
    assert {tasks[s]["mode"] for s in ("wait_impressions", "wait_labels")} == {"reschedule"}
    assert backfill["tasks"]["choose"]["upstream"] == ["plan"]
    assert set(backfill["tasks"]["backfill_feature"]["upstream"]) == {"choose"}
    assert set(backfill["tasks"]) == {"plan", "choose", "backfill_feature", "join_args", "label_join"}
    spark_tasks = [(d, t) for d in bag["dags"].values() for t in d["tasks"].values() if t["type"] == "FeaturehouseJob"]
    assert len(spark_tasks) == 6  # daily 1, backfill 2, streaming 1, retention 1, optimize 1: all in the Spark pool
    assert {t["pool"] for _, t in spark_tasks} == {"featurehouse_spark"}
    every_task = [t for d in bag["dags"].values() for t in d["tasks"].values()]
    assert all(t["callback"] for t in every_task)
    assert bag["retries"] == 2 and all(t["retries"] == bag["retries"] for _, t in spark_tasks)  # common.RETRIES
    retries = {(d, name): t["retries"] for d, dag in bag["dags"].items() for name, t in dag["tasks"].items()}
    assert {k: n for k, n in retries.items() if n != bag["retries"]} == {  # the backfill's checks fail at once
        ("featurehouse_backfill", "plan"): 0, ("featurehouse_backfill", "choose"): 0}


def test_daily_run_waits_for_every_label_partition_then_publishes_its_ds(tmp_path, airflow, warehouse, published, spark):
    """``airflow dags test``: the label sensor waits while ds+3's labels are missing, then while they are not
    closed; only once ``_SUCCESS`` lands does the join run. Exactly that ds is published, with its stats."""
    last = warehouse / "landing" / "labels" / f"ds={LAST_LABEL_DAY}"
    parked = tmp_path / "parked"
    shutil.move(last, parked)  # missing

    events: list[str] = []
    output: list[str] = []
    started = time.monotonic()
    run = airflow.popen("dags", "test", "featurehouse_daily", DS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    waits = 0
    try:
        for line in run.stdout:
            output.append(line)
            if "waits for 1 of 4 labels partitions" in line and LAST_LABEL_DAY in line:
                waits += 1
                if waits == 2:  # seen missing twice: land the folder, still without its marker
                    shutil.move(parked, last)
                    (last / "_SUCCESS").unlink()
                    events.append("landed open")
                elif waits == 4:  # seen open twice: close it
                    (last / "_SUCCESS").touch()
                    events.append("closed")
            elif "running task <TaskInstance: featurehouse_daily.label_join" in line:
                events.append("join")
            elif "failed (try" in line and "featurehouse:" in line:
                events.append(line.strip())
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        if parked.exists():
            shutil.move(parked, last)
        (last / "_SUCCESS").touch()
    print(f"featurehouse_daily for {DS}: airflow dags test took {time.monotonic() - started:.0f}s")

    assert events == ["landed open", "closed", "join"]
    engine = running_engine(EngineFiles(warehouse))  # the join ran on the warehouse's engine, which it started
    assert engine is not None and f"featurehouse: starting the engine for {warehouse}" in "".join(output)
    table = spark.read.format("delta").load(str(warehouse / "warehouse" / "featurehouse.db" / "ads"))
    assert [r.ds for r in table.select("ds").distinct().collect()] == [DS]
    published[DS] = _one_copy(spark, warehouse, DS)
    # the join's own statistics, of the version it published and of every row of it
    stats = spark.read.format("delta").load(str(warehouse / "warehouse" / "featurehouse_catalog.db" / "feature_stats"))
    published_version = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse / 'warehouse' / 'featurehouse.db' / 'ads'}` "
                                  "LIMIT 1").first().version  # fmt: skip
    assert {(r.dataset, r.ds, r.table_version, r.rows) for r in stats.select("dataset", "ds", "table_version", "rows")
            .distinct().collect()} == {("ads", DS, published_version, published[DS])}  # fmt: skip


def test_a_failed_task_logs_one_line_naming_the_ds_and_the_cause(airflow):
    """A ds whose logs never land: the sensor times out, the callback names the ds, and the join never runs."""
    done = airflow.cli("dags", "test", "featurehouse_daily", "2026-11-09", timeout=180,
                       env={"FEATUREHOUSE_SENSOR_TIMEOUT_S": "3"})  # fmt: skip
    output = done.stdout + done.stderr
    failures = [line for line in output.splitlines() if "featurehouse: featurehouse_daily." in line]
    assert failures, output[-4000:]
    assert any("wait_impressions for ds 2026-11-09 failed (try 1)" in line for line in failures), failures
    states = {task: state for task, (state, _) in airflow.states("featurehouse_daily").items()}
    assert states["wait_impressions"] == "failed"
    assert states["label_join"] == "upstream_failed"


def test_the_spark_pool_widens_on_the_engine_or_a_shared_metastore(airflow):
    """``airflow_dags.setup`` sizes the pool from the Variable. On the embedded default every Spark task is a client of
    the one engine, which holds Derby for all of them: three slots are taken. Spark-submitted jobs (a cluster's
    master) on embedded Derby are refused a second slot; a shared metastore allows it."""
    from airflow_dags.setup import pool_slots

    setup = [sys.executable, "-m", "airflow_dags.setup"]
    wide = {**airflow.env, "AIRFLOW_VAR_FEATUREHOUSE_SPARK_SLOTS": "3"}
    done = subprocess.run(setup, cwd=REPO, env=wide, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert airflow.query("select slots from slot_pool where pool = 'featurehouse_spark'") == [(3,)]
    back = subprocess.run(setup, cwd=REPO, env=airflow.env, capture_output=True, text=True, timeout=120, check=False)
    assert back.returncode == 0 and airflow.query("select slots from slot_pool where pool = 'featurehouse_spark'") == [(1,)]
    with pytest.raises(SystemExit, match="spark://master:7077 and use the embedded Derby metastore"):
        pool_slots("3", None, "spark://master:7077")
    shared = json.dumps({"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:postgresql://db:5432/metastore"})
    assert pool_slots("3", shared, "spark://master:7077") == 3


def test_backfill_dag_fills_a_derived_feature_and_refuses_a_reversed_range(airflow, warehouse, spark):
    """The feature branch runs ``etl/maintenance/backfill.py`` (the ds was written with the feature, so nothing changes) and
    skips the re-join branch; a reversed range fails in ``plan``, before any Spark."""
    version = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse / 'warehouse' / 'featurehouse.db' / 'ads'}` LIMIT 1").first().version
    conf = {"dataset": "ads", "feature": "item_ctr_7d_log", "start": DS, "end": DS}
    done = airflow.cli("dags", "test", "featurehouse_backfill", "--conf", json.dumps(conf), timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    states = {task: state for task, (state, _) in airflow.states("featurehouse_backfill").items()}
    assert states["backfill_feature"] == "success"
    assert {states[t] for t in ("join_args", "label_join")} == {"skipped"}
    assert "0 partitions written, 1 already filled" in done.stdout + done.stderr
    after = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse / 'warehouse' / 'featurehouse.db' / 'ads'}` LIMIT 1").first().version
    assert after == version  # nothing committed

    reversed_range = {"dataset": "ads", "start": "2026-11-05", "end": DS}
    done = airflow.cli("dags", "test", "featurehouse_backfill", "--conf", json.dumps(reversed_range), timeout=300)
    assert "featurehouse_backfill.plan for ds" in done.stdout + done.stderr
    assert f"end {DS} is before start 2026-11-05; give the range in order" in done.stdout + done.stderr
    states = {task: state for task, (state, _) in airflow.states("featurehouse_backfill").items()}
    assert states["plan"] == "failed" and states["backfill_feature"] == "upstream_failed"


@contextmanager
def services(airflow: Airflow) -> Iterator[None]:
    """An API server (the tasks' Execution API) and a scheduler with the LocalExecutor, stopped on exit."""
    logs = [(airflow.home / f"{name}.log").open("w") for name in ("api-server", "scheduler")]
    port = airflow.env["AIRFLOW__API__PORT"]
    procs = [airflow.popen("api-server", "--port", port, stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        # The scheduler starts only once the Execution API answers: a task whose first call times out while the
        # server is still starting fails its first try (seen on a slower machine: httpx.ReadTimeout, then a retry).
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/execution/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the API server did not answer on port {port}: "
                            f"{(airflow.home / 'api-server.log').read_text()[-3000:]}")  # fmt: skip
            time.sleep(1)
        procs.append(airflow.popen("scheduler", stdout=logs[1], stderr=subprocess.STDOUT))
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        for log in logs:
            log.close()


@pytest.mark.timeout(1500)  # the deadline below, plus the deployment's set-up
def test_scheduled_daily_stream_and_retention_share_the_engine(tmp_path, warehouse, published, spark):
    """A real scheduler: the catchup run of the daily DAG, the hourly stream and the daily retention all start
    at once, with a slot each in the pool, and share the embedded metastore: each Spark task is a client of the
    warehouse's one engine. All succeed."""
    registry = tmp_path / "registry"
    shutil.copytree(REPO / "schemas" / "datasets", registry)
    ads = registry / "ads.yaml"
    ads.write_text(ads.read_text().replace("retention: 365d", "retention: 20d"))  # so the dry run has work
    (port,) = free_ports(1)
    airflow = make_airflow(
        tmp_path / "airflow", warehouse,
        FEATUREHOUSE_DAILY_START=DS, FEATUREHOUSE_DAILY_END=DS,
        AIRFLOW_VAR_FEATUREHOUSE_REGISTRY_DIR=str(registry),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API_AUTH__JWT_SECRET="featurehouse-tests",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW_VAR_FEATUREHOUSE_SPARK_SLOTS="3",
    )  # fmt: skip
    for dag_id in SPARK_DAGS:
        assert airflow.cli("dags", "unpause", dag_id).returncode == 0

    # Each DAG's first run: the hourly stream schedules another run when the clock passes the hour mid-test.
    first = "(select min(id) from dag_run group by dag_id)"
    # Generous: as three spark-submits one after another (2026-12-02) these took past 600 s beside the other lane.
    deadline = time.monotonic() + 1200
    with services(airflow):
        while time.monotonic() < deadline:
            runs = dict(airflow.query(f"select dag_id, state from dag_run where id in {first}"))
            if len(runs) == 3 and set(runs.values()) <= {"success", "failed"}:
                break
            time.sleep(3)
    assert runs == dict.fromkeys(SPARK_DAGS, "success"), (runs, airflow.query("select dag_id, task_id, state from task_instance"))

    # The daily run the scheduler made: logical date = the ds; Airflow 3's cron runs have an empty data interval.
    ((run_type, logical, start, end),) = airflow.query(
        "select run_type, logical_date, data_interval_start, data_interval_end from dag_run where dag_id = 'featurehouse_daily'"
    )
    assert run_type == "scheduled" and logical.startswith(DS) and start == end == logical
    ((fields,),) = airflow.query(
        "select rendered_fields from rendered_task_instance_fields where dag_id = 'featurehouse_daily' "
        "and task_id = 'label_join'"
    )
    args = json.loads(fields)["application_args"]
    assert args[args.index("--ds") + 1] == DS

    # Each Spark task in the pool, on the engine.
    spark_tasks = airflow.query(
        "select dag_id, task_id, start_date, end_date, pool from task_instance where pool = 'featurehouse_spark' "
        f"and (dag_id, run_id) in (select dag_id, run_id from dag_run where id in {first}) order by start_date"
    )
    assert {(d, t) for d, t, *_ in spark_tasks} == {("featurehouse_daily", "label_join"), ("featurehouse_streaming", "stream"),
                                                   ("featurehouse_retention", "retention")}  # fmt: skip
    for dag_id, task_id, *_ in spark_tasks:
        log = next((airflow.home / "logs").glob(f"dag_id={dag_id}/*/task_id={task_id}/attempt=1.log")).read_text()
        assert re.search(rf"featurehouse {task_id} on the \S+ engine: ", log), log[-3000:]

    # The retention run was a dry run: it listed the expired day and removed nothing.
    log = next((airflow.home / "logs").glob("dag_id=featurehouse_retention/*/task_id=retention/attempt=1.log")).read_text()
    assert re.search(rf"would drop 1 partitions \(ds {DS} \.\. {DS}, [\d,]+ rows\) from featurehouse\.ads", log), log[-3000:]
    count = _one_copy(spark, warehouse, DS)  # the daily ran again for the ds, the stream published it too: one copy
    if DS in published:
        assert count == published[DS]


def test_a_refused_ds_fails_at_once_naming_the_gate_report(airflow, warehouse, spark):
    """A ds logged by a broken release fails the quality gate: the join fails on its first try (retrying cannot
    change the data), the failure line carries the job's message with the report's path, the table is unchanged."""
    from featurehouse.demo_faults import break_release

    day = DS
    before = _partition(spark, warehouse, day).count()
    assert before > 0
    break_release(warehouse / "landing", dt.date.fromisoformat(day), seed=7)
    done = airflow.cli("dags", "test", "featurehouse_daily", day, timeout=400)
    output = done.stdout + done.stderr

    states = airflow.states("featurehouse_daily")
    assert states["label_join"] == ("failed", 1), states
    (line,) = {l.split("[featurehouse]")[0].strip() for l in output.splitlines() if "featurehouse: featurehouse_daily.label_join" in l}
    assert f"label_join for ds {day} failed (try 1): featurehouse label_join failed for ds {day}: ds {day} of ads failed" in line
    report = re.search(r"the report in (\S+\.json)", line)
    assert report and Path(report.group(1)).is_file(), line
    assert _partition(spark, warehouse, day).count() == before
