"""``featurehouse cluster up|down|status``: a real Spark cluster on this machine, to try the scale-out path.

    featurehouse cluster up                 # PostgreSQL metastore, Spark master and worker, Thrift server
    featurehouse label-join --profile cluster --dataset ads --ds 2026-11-01
    .venv/bin/beeline -u jdbc:hive2://127.0.0.1:10000 -e "SHOW TABLES IN featurehouse"
    featurehouse cluster down

What it starts is read from the profile (default ``cluster``, ``profiles/cluster.yaml``): the
master's address from ``spark.master``, PostgreSQL's port, user and database from the
metastore's JDBC URL, the worker's size and the Thrift port from its ``cluster:`` section. Each
service is a process of its own, started from the installed Spark and Debian's PostgreSQL, with
its pid and log under ``<home>/cluster/``. ``up`` leaves a running service as it is, ``down``
stops them all (data and metastore stay), ``status`` tells which run.

PostgreSQL refuses to run as root: run as root, it runs as the ``postgres`` user, so its data
folder (default ``<home>/cluster/postgres``) must be one that user can reach (``--postgres-dir``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from tabulate import tabulate

from schemas.errors import ConfigError, FeaturehouseError
from schemas.exit import run_command
from schemas.paths import default_home
from schemas.progress import Progress, stderr_progress
from schemas.settings import METASTORE_URL
from warehouse.confs import delta_jars, session_confs, spark_submit_args
from warehouse.metastore import init_schema
from warehouse.processes import pid_alive, port_open, stop, tail, wait_until_ready
from schemas.profiles import Profile, load_profile

THRIFT_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
START_TIMEOUT_S = 120.0


def spark_bin(name: str) -> str:
    """A script of the installed pyspark: spark-class, spark-submit, beeline."""
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


@dataclass(frozen=True)
class Endpoints:
    """Where the profile's services listen, read from its settings."""

    master_host: str
    master_port: int
    pg_port: int
    pg_user: str
    pg_database: str
    thrift_port: int

    @classmethod
    def of(cls, profile: Profile, settings: dict[str, str]) -> Endpoints:
        master = urlparse(settings.get("spark.master", ""))
        url = settings.get(METASTORE_URL, "")
        pg = urlparse(url.removeprefix("jdbc:"))
        if master.scheme != "spark" or not master.port:
            raise ConfigError(f"profile {profile.name}: spark.master must be spark://HOST:PORT for `cluster up`, "
                              f"not {master.geturl() or '(unset)'}")  # fmt: skip
        if pg.scheme != "postgresql" or pg.hostname not in ("127.0.0.1", "localhost") or not pg.path.strip("/"):
            raise ConfigError(f"profile {profile.name}: `cluster up` starts a PostgreSQL metastore on this machine, "
                              f"so {METASTORE_URL} must be jdbc:postgresql://127.0.0.1:PORT/DATABASE, not "
                              f"{url.split('?')[0] or '(unset)'}")  # fmt: skip
        return cls(master_host=master.hostname or "127.0.0.1", master_port=master.port, pg_port=pg.port or 5432,
                   pg_user=settings.get("spark.hadoop.javax.jdo.option.ConnectionUserName", "featurehouse"),
                   pg_database=pg.path.strip("/"), thrift_port=profile.cluster.thrift_port)  # fmt: skip


# ---------------------------------------------------------------- PostgreSQL


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)), None)
    if not found:
        raise ConfigError(f"PostgreSQL's {name} is not installed; install the server (Debian: apt-get install "
                          "postgresql), or point the profile's metastore URL at a running server")  # fmt: skip
    return str(found)


def as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run ``command`` as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass(frozen=True)
class Postgres:
    data: Path
    log: Path
    port: int
    user: str

    def running(self) -> bool:
        if not (self.data / "PG_VERSION").exists():
            return False
        done = subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", str(self.data), "status"]), capture_output=True)
        return done.returncode == 0

    def _prepare(self) -> None:
        """Make the folder of ``data`` and the log; as root, give it to the postgres user, who must reach it."""
        folder = self.data.parent
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        shutil.chown(folder, "postgres")
        if subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(folder)]).returncode != 0:
            raise ConfigError(f"PostgreSQL runs as the postgres user here (it refuses root), and that user cannot "
                              f"reach {folder}; pass --postgres-dir DIR, a folder it can (e.g. under /var/tmp)")  # fmt: skip

    def start(self, progress: Progress) -> None:
        if self.running():
            progress(f"postgresql: running on 127.0.0.1:{self.port} ({self.data})")
            return
        self._prepare()
        if not (self.data / "PG_VERSION").exists():
            progress(f"postgresql: initdb {self.data}")
            initdb = [pg_bin("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-instructions"]
            done = subprocess.run(as_postgres(initdb), capture_output=True, text=True)
            if done.returncode != 0:
                raise FeaturehouseError(f"initdb {self.data} failed: {(done.stderr or done.stdout).strip()[-400:]}")
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        done = subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                                           "-w", "-t", "60", "start"]), capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            raise FeaturehouseError(f"PostgreSQL did not start on port {self.port}; its log: {self.log}\n{tail(self.log, 5)}")
        progress(f"postgresql: up on 127.0.0.1:{self.port}")

    def create_database(self, name: str, progress: Progress) -> None:
        psql = [pg_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "postgres", "-tAc"]
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ConfigError(f"metastore database {name!r}: use lower-case letters, digits and _")
        found = subprocess.run([*psql, f"SELECT 1 FROM pg_database WHERE datname = '{name}'"], capture_output=True, text=True)
        if found.stdout.strip() != "1":
            subprocess.run([*psql, f'CREATE DATABASE "{name}"'], capture_output=True, text=True, check=True)
            progress(f"postgresql: created database {name}")

    def stop(self, progress: Progress) -> None:
        if self.running():
            subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
                           capture_output=True, check=False)  # fmt: skip
            progress("postgresql: stopped")


# ---------------------------------------------------------------- JVM services (pid file + log)


@dataclass(frozen=True)
class Service:
    """A JVM process of the cluster, started in a session of its own, with a pid file and a log."""

    name: str
    state: Path

    @property
    def pid_file(self) -> Path:
        return self.state / f"{self.name}.pid"

    @property
    def log(self) -> Path:
        return self.state / f"{self.name}.log"

    def pid(self) -> int | None:
        """The running process's pid, or None (a child of this process that has exited is reaped here)."""
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        self.state.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)  # fmt: skip
        self.pid_file.write_text(str(process.pid))
        return process

    def stop(self, progress: Progress, timeout_s: float = 30.0) -> None:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        stop(pid, timeout_s=timeout_s, group=True)
        self.pid_file.unlink(missing_ok=True)
        progress(f"{self.name}: stopped")


# ---------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Cluster:
    profile: Profile
    home: Path
    postgres_dir: Path | None = None

    @property
    def state(self) -> Path:
        return self.home / "cluster"

    @property
    def settings(self) -> dict[str, str]:
        return self.profile.settings(self.home)

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints.of(self.profile, self.settings)

    @property
    def postgres(self) -> Postgres:
        folder = self.postgres_dir or self.state / "postgres"
        return Postgres(data=folder / "data", log=folder / "postgres.log", port=self.endpoints.pg_port,
                        user=self.endpoints.pg_user)  # fmt: skip

    def service(self, name: str) -> Service:
        return Service(name, self.state)

    def env(self) -> dict[str, str]:
        # executors run this Python (the project installed in it), on the loopback address
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                "SPARK_WORKER_DIR": str(self.state / "work")}  # fmt: skip

    def up(self, progress: Progress, *, thrift: bool = True) -> str:
        ends = self.endpoints
        self.postgres.start(progress)
        self.postgres.create_database(ends.pg_database, progress)
        progress(f"metastore: {init_schema(session_confs(self.home, self.settings)).format()}")
        self._start_master(ends, progress)
        self._start_worker(ends, progress)
        if thrift:
            self.start_thrift(progress)
        return self.status()

    def _start_java(self, name: str, command: list[str], ready: Callable[[], bool], progress: Progress) -> None:
        service = self.service(name)
        if service.pid() is not None:
            progress(f"{name}: running (pid {service.pid()})")
            return
        process = service.start(command, self.env())
        wait_until_ready(name, ready, process, service.log, timeout_s=START_TIMEOUT_S, interval_s=0.5, tail_lines=5)
        progress(f"{name}: up (pid {process.pid}, log {service.log})")

    def _start_master(self, ends: Endpoints, progress: Progress) -> None:
        if port_open(ends.master_host, ends.master_port) and self.service("master").pid() is None:
            raise ConfigError(f"{ends.master_host}:{ends.master_port} is taken by another process; stop it or change "
                              f"spark.master in {self.profile.name}")  # fmt: skip
        command = [spark_bin("spark-class"), "org.apache.spark.deploy.master.Master", "--host", ends.master_host,
                   "--port", str(ends.master_port), "--webui-port", str(self.profile.cluster.master_ui_port)]  # fmt: skip
        self._start_java("master", command, lambda: port_open(ends.master_host, ends.master_port), progress)

    def _start_worker(self, ends: Endpoints, progress: Progress) -> None:
        services = self.profile.cluster
        log = self.service("worker").log
        registered = log.read_text(errors="replace").count("Successfully registered with master") if log.exists() else 0
        command = [spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker",
                   f"spark://{ends.master_host}:{ends.master_port}", "--host", "127.0.0.1",
                   "--cores", str(services.cores()), "--memory", services.worker_memory,
                   "--work-dir", str(self.state / "work"), "--webui-port", str(services.worker_ui_port)]  # fmt: skip
        ready = lambda: log.read_text(errors="replace").count("Successfully registered with master") > registered  # noqa: E731
        self._start_java("worker", command, ready, progress)

    def start_thrift(self, progress: Progress) -> None:
        """The Spark Thrift server (HiveServer2's protocol: beeline, JDBC, ODBC) on the shared metastore."""
        ends = self.endpoints
        # Delta on the driver's own classpath too: the server's JDBC sessions load the catalog from it, not spark.jars
        settings = {**self.settings, "spark.cores.max": "1", "spark.app.name": "featurehouse-thrift",
                    "spark.driver.extraClassPath": os.pathsep.join(delta_jars())}  # fmt: skip
        command = [spark_bin("spark-submit"), "--class", THRIFT_CLASS, *spark_submit_args(self.home, settings),
                   "spark-internal", "--hiveconf", f"hive.server2.thrift.port={ends.thrift_port}",
                   "--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1"]  # fmt: skip
        self._start_java("thrift", command, lambda: port_open("127.0.0.1", ends.thrift_port), progress)

    def down(self, progress: Progress) -> str:
        for name in ("thrift", "worker", "master"):
            self.service(name).stop(progress)
        self.postgres.stop(progress)
        return self.status()

    def status(self) -> str:
        ends = self.endpoints
        rows = [
            ("postgresql", self.postgres.running(), f"jdbc:postgresql://127.0.0.1:{ends.pg_port}/{ends.pg_database}"),
            ("master", self.service("master").pid() is not None, f"spark://{ends.master_host}:{ends.master_port}"),
            ("worker", self.service("worker").pid() is not None, f"{self.profile.cluster.cores()} cores, "
                                                                 f"{self.profile.cluster.worker_memory}"),
            ("thrift", self.service("thrift").pid() is not None, f"jdbc:hive2://127.0.0.1:{ends.thrift_port}"),
        ]  # fmt: skip
        table = tabulate([(name, "running" if up else "stopped", where) for name, up, where in rows], tablefmt="plain",
                         disable_numparse=True)  # fmt: skip
        return "\n".join([f"cluster of profile {self.profile.name} (state in {self.state}):", table])


@contextmanager
def running(cluster: Cluster, *, thrift: bool = True, progress: Progress = stderr_progress) -> Iterator[Cluster]:
    """The cluster up for the block and down after it, whatever happens (for tests and scripts)."""
    try:
        cluster.up(progress, thrift=thrift)
        yield cluster
    finally:
        cluster.down(progress)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="featurehouse cluster", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))  # fmt: skip
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--profile", default="cluster", help="the profile whose services to run (default: cluster)")
    parser.add_argument("--home", type=Path, default=None, help="data folder (default: $FEATUREHOUSE_HOME, else this checkout's data/)")
    parser.add_argument("--postgres-dir", type=Path, default=None,
                        help="folder of PostgreSQL's data and log (default: <home>/cluster/postgres)")  # fmt: skip
    parser.add_argument("--no-thrift", action="store_true", help="up: do not start the Thrift (JDBC) server")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> str:
        ns = parse_args(argv)
        home = (ns.home or default_home()).resolve()
        cluster = Cluster(load_profile(ns.profile), home, ns.postgres_dir.resolve() if ns.postgres_dir else None)
        if ns.action == "up":
            return cluster.up(stderr_progress, thrift=not ns.no_thrift)
        if ns.action == "down":
            return cluster.down(stderr_progress)
        return cluster.status()

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
