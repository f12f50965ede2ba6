"""Scale-out on real services: a Spark standalone cluster, a shared PostgreSQL metastore, the Thrift server.

One module-scoped cluster (``featurehouse.cluster``: PostgreSQL from Debian's package, the
master and a worker from the installed Spark) runs on free ports under a profile written for
the test; everything it starts is stopped at the end. On it, at the same time:

* the label join of one ds, through ``spark-submit --master spark://...``, the job's code unchanged;
* the streaming catch-up of another dataset (a local application), whose publish step opens the
  same metastore while the label join holds it: what embedded Derby cannot do.

The cluster's partition must equal the one the local session makes of the same logs, and the
Thrift server must answer a catalog query from ``beeline`` as ``featurehouse sql`` does.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from etl import label_join
from etl.generate.job import GenerateConfig
from etl.generate.job import run as generate
from featurehouse import cluster as fh_cluster
from featurehouse.spark_args import arguments as spark_args
from schemas.errors import ConfigError
from tests.conftest import SMALL_REGISTRY
from schemas.profiles import load_profile

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
BATCH, STREAMED = "t_scale", "t_scale_stream"
DAY = dt.date(2026, 11, 1)
DS = "2026-11-01"
SMALL = ["--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]
#: The catalog query both SQL clients answer: each gate decision beside the rows its table holds for that ds.
CATALOG_QUERY = (
    "SELECT g.dataset, g.ds, g.decision, g.rows, t.n FROM featurehouse_catalog.quality_gate g JOIN ("
    f"SELECT '{BATCH}' AS dataset, CAST(ds AS STRING) AS ds, count(*) AS n FROM featurehouse.{BATCH} GROUP BY ds "
    f"UNION ALL SELECT '{STREAMED}', CAST(ds AS STRING), count(*) FROM featurehouse.{STREAMED} GROUP BY ds"
    ") t ON g.dataset = t.dataset AND g.ds = t.ds ORDER BY g.dataset, g.ds"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env() -> dict[str, str]:
    """This Python's bin first on PATH: spark-submit finds its Spark (the pyspark wheel) through ``python``."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONUNBUFFERED": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """Five days of generated logs, a registry per dataset, and a profile for this test's cluster on free ports."""
    root = tmp_path_factory.mktemp("scale_out")
    registry_dir = root / "registry"
    registry_dir.mkdir()
    for name in (BATCH, STREAMED):
        (registry_dir / f"{name}.yaml").write_text(SMALL_REGISTRY.format(dataset=name))
    generate(GenerateConfig(home=root, dataset=BATCH, registry_dir=registry_dir, days=5, impressions_per_day=150,
                            users=500, items=200, seed=5))  # fmt: skip
    profile = load_profile("cluster")
    spark = {**profile.spark, "spark.master": f"spark://127.0.0.1:{free_port()}", "spark.cores.max": "1",
             "spark.executor.memory": "1g",
             "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:postgresql://127.0.0.1:{free_port()}/metastore"}  # fmt: skip
    services = {"worker_cores": 2, "worker_memory": "3g", "thrift_port": free_port(),
                "master_ui_port": free_port(), "worker_ui_port": free_port()}  # fmt: skip
    profile_file = root / "test-cluster.yaml"
    profile_file.write_text(json.dumps({"description": "the test's cluster", "spark": spark, "cluster": services}))
    return root, registry_dir, root / "landing", profile_file


@pytest.fixture(scope="module")
def cluster(world):
    """The cluster up (PostgreSQL metastore, master, worker) for the module, and down after it."""
    root, _registry, _landing, profile_file = world
    try:
        fh_cluster.pg_bin("initdb")
    except ConfigError as err:
        pytest.skip(f"no PostgreSQL server here: {err}")
    postgres_dir = Path(tempfile.mkdtemp(prefix="featurehouse-pg-"))  # as root: given to the postgres user
    target = fh_cluster.Cluster(load_profile(str(profile_file)), root / "cluster_home", postgres_dir)
    try:
        with fh_cluster.running(target, thrift=False):
            yield target
    finally:
        shutil.rmtree(postgres_dir, ignore_errors=True)


def _timed(command: list[str]) -> tuple[subprocess.Popen, float]:
    process = subprocess.Popen(command, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, time.monotonic()


@pytest.fixture(scope="module")
def concurrent(world, cluster, spark):
    """The cluster's label join of DS and a local streaming catch-up of another dataset, started together; while
    they run, this test run's own session (local mode, embedded Derby) joins the same ds, for comparison."""
    root, registry_dir, landing, profile_file = world
    home = str(cluster.home)
    data = ["--home", home, "--landing", str(landing), "--registry-dir", str(registry_dir)]
    submit = ["spark-submit", *shlex.split(spark_args(["--profile", str(profile_file), "--home", home, *SMALL])),
              "etl/label_join.py", "--dataset", BATCH, "--ds", DS, *data]  # fmt: skip
    stream = [sys.executable, "-m", "featurehouse.cli", "stream", "--dataset", STREAMED, "--source", "files",
              "--trigger", "available-now", "--profile", str(profile_file), "--conf", "spark.master=local[1]",
              *SMALL, *data]  # fmt: skip
    runs = {name: _timed(command) for name, command in (("label_join", submit), ("stream", stream))}
    label_join.run(spark, label_join.LabelJoinConfig(dataset=BATCH, ds=DAY, home=root / "local", landing=str(landing),
                                                     registry_dir=registry_dir))  # fmt: skip
    results = {}
    for name, (process, started) in runs.items():
        output, _ = process.communicate(timeout=900)
        results[name] = (process.returncode, output, started, time.monotonic())
    return results


def test_label_join_on_the_cluster_gives_the_local_partition(cluster, concurrent, spark):
    status, output, _started, _ended = concurrent["label_join"]
    assert status == 0, output[-3000:]
    assert f"-> featurehouse.{BATCH}" in output
    local = spark.table(f"featurehouse.{BATCH}").where(F.col("ds") == DS)
    on_cluster = spark.read.format("delta").load(str(cluster.home / "warehouse" / "featurehouse.db" / BATCH))
    assert on_cluster.count() == local.count() > 100
    assertDataFrameEqual(on_cluster.where(F.col("ds") == DS), local)


def _sql_json(profile_file: Path, home: Path, statement: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "featurehouse.cli", "sql", "--format", "json", "--all",
                           "--profile", str(profile_file), "--home", str(home), "--conf", "spark.master=local[1]",
                           *SMALL, statement], cwd=REPO, env=env(), capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def catalog_answer(world, cluster, concurrent) -> list[dict]:
    """``featurehouse sql``'s answer to the catalog query through the shared metastore (a third application), while
    the Thrift server starts on the cluster (a fourth) for the beeline test."""
    for status, output, _started, _ended in concurrent.values():
        assert status == 0, output[-3000:]
    failed: list[BaseException] = []

    def start_thrift() -> None:
        try:
            cluster.start_thrift(lambda _message: None)
        except BaseException as err:  # re-raised below, in the test's own thread
            failed.append(err)

    thrift = threading.Thread(target=start_thrift)
    thrift.start()
    try:
        answer = _sql_json(world[3], cluster.home, CATALOG_QUERY)
    finally:
        thrift.join()
    if failed:
        raise failed[0]
    return answer


def test_a_stream_and_a_batch_job_share_the_postgres_metastore_at_once(concurrent, catalog_answer):
    (_, _, batch_start, batch_end), (_, stream_output, stream_start, stream_end) = (
        concurrent["label_join"], concurrent["stream"])  # fmt: skip
    assert max(batch_start, stream_start) < min(batch_end, stream_end)  # the two applications overlapped
    assert f"through {DS}" in stream_output  # the stream published (its publish step opened the metastore)
    by_dataset = {(r["dataset"], r["ds"]): r for r in catalog_answer}
    assert (BATCH, DS) in by_dataset and (STREAMED, DS) in by_dataset  # each application's table and gate rows
    for row in catalog_answer:
        assert row["decision"] == "published" and row["rows"] == row["n"] > 0


def beeline_rows(output: str) -> list[list[str]]:
    """The rows of beeline's csv2 output, header first (its prompt, echoed before the header, removed)."""
    lines = [line.split("> ", 1)[1] if line.startswith("0: jdbc:hive2") else line for line in output.splitlines()]
    return list(csv.reader(line for line in lines if line.strip()))


def test_beeline_through_the_thrift_server_answers_as_featurehouse_sql(cluster, catalog_answer):
    assert cluster.service("thrift").pid() is not None  # started by catalog_answer
    url = f"jdbc:hive2://127.0.0.1:{cluster.endpoints.thrift_port}"
    done = subprocess.run([fh_cluster.spark_bin("beeline"), "-u", url, "--silent=true", "--outputformat=csv2",
                           "-e", CATALOG_QUERY], env=env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    header, *rows = beeline_rows(done.stdout)
    assert header == list(catalog_answer[0])
    assert rows == [[str(v) for v in r.values()] for r in catalog_answer]
