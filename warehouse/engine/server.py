"""The engine's process: one Spark application for a home, with the Spark Connect server inside it.

    python -m warehouse.engine.server --home data [--idle-stop-minutes 30] [--conf k=v ...]

Started by ``featurehouse engine start`` or by the first command that needs an engine (``client``),
in the background, with its output in ``<home>/engine/engine.log``. It is the classic session of the
embedded default (Delta, Hive with Derby under ``<home>``, the same jars and settings) with Spark's
Connect plugin, listening on 127.0.0.1 only, behind the token in ``<home>/engine/token``. Its Python
workers (a stream's ``foreachBatch``) run with this interpreter, the project's own environment.

Every second it writes its heartbeat; when no operation and no Spark job has run for the idle time,
it stops itself. SIGTERM and SIGINT stop it cleanly: Spark stops, its state file goes.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pyspark

from schemas.paths import default_home
from warehouse.confs import LOOPBACK, loopback_environment, parse_conf_pairs, session_confs
from warehouse.engine.state import (CLIENT_PREFIX, ENGINE_VERSION, INSIDE_ENGINE, EngineFiles, EngineState,
                                    code_version, now_iso, read_state, write_json, write_state)
from warehouse.session import check_metastore_free, configure_builder, quiet_query_context_logs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_IDLE_STOP_MINUTES = 30.0
IDLE_VARIABLE = "FEATUREHOUSE_ENGINE_IDLE_MINUTES"
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


#: Where Spark's Connect server reads its token when ``spark.connect.authenticate.token`` is not set: the token
#: goes to the JVM through its environment (readable by this user alone), not its command line (``ps`` shows
#: that to every user, and pyspark puts every setting on it).
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


#: The FAIR scheduler's pools: one default pool whose jobs share the cores (FIFO is Spark's own default there).
FAIR_POOLS = Path(__file__).with_name("fairscheduler.xml")


def engine_confs(home: Path, overrides: dict[str, str], port: int) -> dict[str, str]:
    """The embedded default's settings with the Connect server on ``port`` of the loopback (its token: see
    :data:`TOKEN_VARIABLE`).

    ``spark.connect.grpc.port.maxRetries`` 0: a port taken since it was chosen fails the start rather than moving
    to another port than the state file will name. FAIR scheduling, with a default pool that is FAIR within too
    (:data:`FAIR_POOLS`): one client's label join does not hold a stream's or a SQL question's jobs behind it.
    """
    confs = session_confs(home, overrides)
    confs.update({
        "spark.app.name": "featurehouse-engine",
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.port.maxRetries": "0",
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(FAIR_POOLS),
        ENGINE_VERSION: code_version(),  # what a client of a remote engine compares its own with
    })  # fmt: skip
    return confs


def scheduling(spark: SparkSession) -> str:
    """How the scheduler shares the engine, as Spark itself reports it: its mode and the default pool's."""
    sc = spark.sparkContext
    pool = sc._jsc.sc().getPoolForName("default")
    within = pool.get().schedulingMode().toString() if pool.isDefined() else "none"
    return f"{sc.getConf().get('spark.scheduler.mode')}, every client's jobs in the pool default ({within} within)"


class Heart:
    """Reads the engine's load from its JVM, writes the heartbeat, closes the sessions of dead clients, and says
    when the idle time has passed.

    A client names its pid in its Connect user id (``client.connect``); a session whose client process is gone
    (killed, say) is closed, which interrupts its operations and stops its streaming queries.
    """

    def __init__(self, spark, files: EngineFiles, idle_stop_s: float) -> None:
        self.spark, self.files, self.idle_stop_s = spark, files, idle_stop_s
        service = spark._jvm.org.apache.spark.sql.connect.service
        self.service = service.SparkConnectService
        self.sessions = getattr(getattr(service, "SparkConnectService$"), "MODULE$").sessionManager()
        self.tracker = spark.sparkContext.statusTracker()
        self.idle_since = time.time()

    def live_sessions(self) -> int:
        """The open Connect sessions, after closing those whose client process has died."""
        live = 0
        active = self.sessions.listActiveSessions()  # a Scala Seq
        for info in (active.apply(i) for i in range(active.size())):
            pid = client_pid(info.userId())
            if pid is not None and not psutil.pid_exists(pid):
                # closed first, said after: the line means its operations are interrupted and its queries stopped
                self.sessions.closeSession(info.key(), getattr(self.sessions, "closeSession$default$2")())
                print(f"featurehouse engine: client pid {pid} is gone; closed its session {info.sessionId()} (its "
                      "operations interrupted, its streaming queries stopped)", flush=True)  # fmt: skip
            else:
                live += 1
        return live

    def beat(self) -> bool:
        """Write the heartbeat; True once the engine has been idle for ``idle_stop_s``."""
        executions = self.service.listActiveExecutions()
        operations = 0 if executions.isLeft() else int(executions.right().get().size())
        jobs = len(self.tracker.getActiveJobsIds())
        sessions = self.live_sessions()
        now = time.time()
        if operations or jobs or sessions:
            self.idle_since = now
        write_json(self.files.heartbeat, {"at": now, "sessions": sessions, "operations": operations, "jobs": jobs,
                                          "idle_since": self.idle_since})  # fmt: skip
        return now - self.idle_since >= self.idle_stop_s


def client_pid(user_id: str) -> int | None:
    """The pid in a featurehouse client's Connect user id (``featurehouse-<pid>``), else None."""
    prefix, _, pid = user_id.partition("-")
    return int(pid) if prefix == CLIENT_PREFIX and pid.isdigit() else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m warehouse.engine.server", description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--idle-stop-minutes", type=float, default=None)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


def idle_stop_minutes(given: float | None) -> float:
    if given is not None:
        return given
    return float(os.environ.get(IDLE_VARIABLE) or DEFAULT_IDLE_STOP_MINUTES)


def main(argv: Sequence[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    args = parse_args(argv)
    home = (args.home or default_home()).resolve()
    files = EngineFiles(home)
    idle_stop_s = idle_stop_minutes(args.idle_stop_minutes) * 60
    port = free_port()
    overrides = parse_conf_pairs(args.conf)
    if "spark.connect.authenticate.token" in overrides:
        raise SystemExit("featurehouse engine: the token is the engine's own (<home>/engine/token); do not set one")
    confs = engine_confs(home, overrides, port)
    os.environ[TOKEN_VARIABLE] = files.read_token()
    os.environ[INSIDE_ENGINE] = "1"
    os.environ["PYSPARK_PYTHON"] = sys.executable  # foreachBatch runs in Python workers: this environment's code
    quiet_query_context_logs()
    check_metastore_free(home, confs)
    loopback_environment(confs)
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: stopping.append(number))
    spark = configure_builder(SparkSession.builder, confs).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        # open the metastore now: the engine holds embedded Derby's lock from the moment it says it runs, so that a
        # classic session started beside it fails at once rather than taking the metastore from under it
        spark.catalog.listDatabases()
        shown = {k: v for k, v in overrides.items() if "token" not in k.lower()}
        write_state(files, EngineState(
            pid=os.getpid(), port=port, started_at=now_iso(), version=code_version(), pyspark=pyspark.__version__,
            python=sys.executable, idle_stop_s=idle_stop_s, driver_memory=confs.get("spark.driver.memory", ""),
            settings=shown, ui=spark.sparkContext.uiWebUrl or "", scheduling=scheduling(spark),
        ))  # fmt: skip
        print(f"featurehouse engine: listening on {LOOPBACK}:{port} for {home} (pid {os.getpid()})", flush=True)
        heart = Heart(spark, files, idle_stop_s)
        while not stopping:
            if heart.beat():
                print(f"featurehouse engine: idle for {idle_stop_s / 60:g} min, stopping", flush=True)
                break
            time.sleep(1.0)
        if stopping:
            print(f"featurehouse engine: signal {stopping[0]}, stopping", flush=True)
    finally:
        state = read_state(files)
        if state is not None and state.pid == os.getpid():
            files.state.unlink(missing_ok=True)
            files.heartbeat.unlink(missing_ok=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
