"""What the featurehouse DAGs share: settings, the Spark pool, the job operator, the landing sensor.

Nothing heavy is imported here or in the DAG files (no pyspark, torch or Great Expectations):
a job is imported when its task runs, as a client of the engine, or runs in a spark-submit
process (``FeaturehouseJob``). Settings are read when a task runs, never at parse time:

========================== =================================================================
Airflow Variable           meaning (default: works on the embedded set-up)
========================== =================================================================
featurehouse_home          the data folder (default: schemas.paths.default_home: $FEATUREHOUSE_HOME, else <repo>/data)
featurehouse_landing       the landing zone root, a path or URI (default: <home>/landing)
featurehouse_registry_dir  the registry folder (default: schemas/datasets of this repo)
featurehouse_spark_conf    a JSON object of Spark settings for every job, e.g. a shared metastore
featurehouse_spark_slots   how many Spark tasks may run at once (``python -m airflow_dags.setup``)
featurehouse_retention_apply  "true": scheduled retention runs remove; otherwise they only list
========================== =================================================================

The Spark Connection ``featurehouse_spark`` names the master (``local[*]`` by default; a
``spark://host:7077`` for a standalone cluster). Every Spark task takes a slot of the pool
``featurehouse_spark`` (``airflow_dags.setup`` says how many are safe).

Parse-time knobs are environment variables (reading Variables while parsing costs a metastore
round trip per parse): ``FEATUREHOUSE_DAILY_START`` / ``FEATUREHOUSE_DAILY_END`` (the first and
last ds the daily DAG schedules), ``FEATUREHOUSE_SENSOR_POKE_S``, ``FEATUREHOUSE_SENSOR_TIMEOUT_S`` and
``FEATUREHOUSE_RETRY_DELAY_S`` (the first retry's delay, 120 s by default, doubling up to 30 minutes).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import ObjectStoragePath, Param, PokeReturnValue, Variable
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from schemas.errors import EXIT_REFUSED
from schemas.paths import default_home, landing_location
from schemas.landing_layout import SUCCESS_MARKER, Landing, RecordKind, label_days
from schemas.names import NAME_PATTERN

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The pool every Spark task takes a slot of, and the Connection naming the Spark master.
SPARK_POOL = "featurehouse_spark"
SPARK_CONN_ID = "featurehouse_spark"
#: The Spark Connect Connection of the engine the jobs are clients of: without a port, the data folder's own.
ENGINE_CONN_ID = "featurehouse_engine"
#: Where the DAGs without catchup start (their first run is the latest tick anyway).
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
#: The retries of every task (``default_args``), with backoff; a refused ds fails at once all the same.
RETRIES = 2

log = logging.getLogger("featurehouse")


def env_date(name: str, default: str | None) -> dt.datetime | None:
    """A parse-time date knob from the environment, as midnight UTC."""
    text = os.environ.get(name) or default
    if not text:
        return None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError as err:
        raise ValueError(f"${name}={text!r} is not a date; write it as YYYY-MM-DD") from err
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)


def env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    try:
        value = float(text) if text else default
    except ValueError as err:
        raise ValueError(f"${name}={text!r} is not a number of seconds, e.g. 600") from err
    if value <= 0:
        raise ValueError(f"${name}={text!r} must be a positive number of seconds, e.g. 600")
    return value


def log_failure(context: Mapping[str, Any]) -> None:
    """A task's failure callback: one line naming the DAG, the task, the ds and the cause."""
    ti = context["ti"]
    error = context.get("exception")
    cause = str(error).strip().splitlines()[0] if error and str(error).strip() else type(error).__name__
    log.error(
        "featurehouse: %s.%s for ds %s failed (try %s): %s",
        ti.dag_id, ti.task_id, context.get("ds", "(no logical date)"), ti.try_number, cause,
    )  # fmt: skip


def dataset_param(what: str) -> Param:
    """The ``dataset`` param of a DAG run: a registry's name, ``ads`` by default."""
    return Param("ads", type="string", pattern=NAME_PATTERN.pattern, description=what)


def default_args(**overrides: Any) -> dict[str, Any]:
    """Retries with backoff and the failure line, for every task."""
    return {
        "owner": "featurehouse",
        "retries": RETRIES,
        "retry_delay": dt.timedelta(seconds=env_seconds("FEATUREHOUSE_RETRY_DELAY_S", 120)),
        "retry_exponential_backoff": True,
        "max_retry_delay": dt.timedelta(minutes=30),
        "on_failure_callback": log_failure,
        **overrides,
    }


def parse_spark_conf(text: str | None) -> dict[str, str]:
    """The Variable ``featurehouse_spark_conf`` (a JSON object of Spark settings; unset: none) as a dict."""
    try:
        spark_conf = json.loads(text or "{}")
    except json.JSONDecodeError as err:
        raise ValueError(
            f"Variable featurehouse_spark_conf is not JSON ({err}); set it to an object of Spark settings, "
            'e.g. {"spark.sql.shuffle.partitions": "64"}'
        ) from err
    if not isinstance(spark_conf, dict):
        raise ValueError("Variable featurehouse_spark_conf must be a JSON object of Spark settings")
    return {str(k): str(v) for k, v in spark_conf.items()}


@dataclass(frozen=True)
class Settings:
    """The featurehouse settings of a task, from Airflow Variables (read at run time)."""

    home: Path
    landing: str
    registry_dir: str | None
    spark_conf: dict[str, str]

    @classmethod
    def load(cls) -> Settings:
        configured = Variable.get("featurehouse_home", default=None)
        home = Path(configured).resolve() if configured else default_home()
        try:
            spark_conf = parse_spark_conf(Variable.get("featurehouse_spark_conf", default=None))
        except ValueError as err:
            raise AirflowFailException(str(err)) from err
        return cls(
            home=home,
            landing=Variable.get("featurehouse_landing", default=None) or landing_location(home),
            registry_dir=Variable.get("featurehouse_registry_dir", default=None),
            spark_conf=spark_conf,
        )


def the_ds(context: Mapping[str, Any]) -> dt.date:
    """The ds a run is for: its logical date (UTC). Airflow 3 gives cron runs an empty data interval
    (start = end = the logical date), so the data interval is not used."""
    logical = context.get("logical_date")
    if logical is None:
        raise AirflowFailException(
            f"{context['dag'].dag_id} runs for one ds and this run has no logical date; trigger it with one, "
            f"e.g. airflow dags trigger {context['dag'].dag_id} --logical-date 2026-11-03"
        )
    return logical.astimezone(dt.timezone.utc).date()


def _closed(partition: str) -> bool:
    path = ObjectStoragePath(partition if "://" in partition else f"file://{partition}")
    return (path / SUCCESS_MARKER).exists()


def landing_ready(kind: str, context: Mapping[str, Any]) -> PokeReturnValue:
    """Whether the landing partitions of ``kind`` that the ds's label join needs are all closed.

    Impressions: the ds itself. Labels: the ds through the day its longest attribution window closes.
    """
    from schemas.registry import load_dataset

    settings = Settings.load()
    day = the_ds(context)
    if kind == RecordKind.LABELS:
        registry = load_dataset(context["params"]["dataset"], settings.registry_dir)
        days = label_days(day, registry.max_window)
    else:
        days = [day]
    partitions = [Landing(settings.landing).partition(RecordKind(kind), d) for d in days]
    missing = [p for p in partitions if not _closed(p)]
    if missing:
        log.info("ds %s waits for %d of %d %s partitions (missing or without _SUCCESS): %s",
                 day, len(missing), len(partitions), kind, ", ".join(missing))  # fmt: skip
    else:
        log.info("ds %s: all %d %s partitions are closed", day, len(partitions), kind)
    return PokeReturnValue(is_done=not missing, xcom_value=partitions)


def job_script(job: str) -> Path:
    """The file spark-submit runs for ``job``, a featurehouse command with ``_`` for ``-`` (``label_join``:
    ``etl/label_join.py``, ``stream``: ``etl/stream/job.py``): the module the CLI runs for that command
    (``featurehouse.cli.COMMANDS``), as a path in this repo."""
    from featurehouse.cli import COMMANDS

    return REPO_ROOT.joinpath(*COMMANDS[job.replace("_", "-")][0].split(".")).with_suffix(".py")


def _error_line(output: str) -> str | None:
    """The featurehouse job's own ``error: ...`` line in spark-submit's output, if it printed one."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith("error: ")]
    return lines[-1][len("error: "):] if lines else None


class FeaturehouseJob(SparkSubmitOperator):
    """One featurehouse Spark command (the module the CLI runs for it, see :func:`job_script`) on the warehouse.

    Where it runs is decided when the task runs:

    * **on an engine** (``warehouse.engine``): on the embedded default (the Connection ``featurehouse_spark`` names a
      ``local`` master and the Variables no metastore of their own), or wherever the Spark Connect Connection
      ``featurehouse_engine`` names a remote engine (a port; its password is the token). The command runs in the
      task's own process as a client of that engine: the data folder's own engine when the Connection has no port
      (started in the background if none runs, its port and token read under ``<home>/engine/``), else
      ``SparkConnectHook``'s URL. No JVM of the task's own.
    * **by spark-submit** otherwise (a cluster's master). At run time it adds what the embedded set-up needs
      (``featurehouse spark-args``: Delta's jars, the metastore, the warehouse folder); the master comes from the
      Connection.

    Either way the job gets the Variables' Spark settings as ``--conf`` (which it applies last),
    ``--registry-dir`` and, for jobs that read the landing zone, ``--landing``, and takes a slot of the
    Spark pool. A job the quality gate refused (exit 3) fails at once with the job's own message, which
    names the gate's report; any other failure is retried.
    """

    def __init__(self, *, job: str, application_args: Sequence[str] | str, reads_landing: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(
            application=str(job_script(job)),
            application_args=application_args,
            conn_id=SPARK_CONN_ID,
            name=f"featurehouse-{job}",
            **kwargs,
        )
        self.job = job
        self.reads_landing = reads_landing

    def execute(self, context: Any) -> None:
        from warehouse.confs import session_confs

        settings = Settings.load()
        args = [str(a) for a in self.application_args or []]
        if settings.registry_dir:
            args += ["--registry-dir", settings.registry_dir]
        if self.reads_landing:
            args += ["--landing", settings.landing]
        for key, value in settings.spark_conf.items():
            args += ["--conf", f"{key}={value}"]
        engine = engine_of(settings)
        if engine is not None:
            self._on_engine(context, settings, args, remote=engine or None)
            return
        confs = session_confs(settings.home, settings.spark_conf)
        local = confs.pop("spark.master", "").startswith("local")  # the Connection names the master
        self.conf = {**confs, **(self.conf or {})}
        self.application_args = args
        self._submit(context, settings, local)

    def _fail(self, context: Any, code: int | None, cause: str) -> None:
        message = f"featurehouse {self.job} failed for ds {context.get('ds')}: {cause}"
        if code == EXIT_REFUSED:
            raise AirflowFailException(message)
        raise AirflowException(message)

    def _on_engine(self, context: Any, settings: Settings, args: list[str], remote: str | None) -> None:
        """The command's ``main`` in this process, a client of the engine; its output goes to the task's log."""
        import importlib
        from contextlib import redirect_stderr

        from featurehouse.cli import COMMANDS
        from warehouse.flags import ENGINE_URL_VARIABLE

        os.environ["FEATUREHOUSE_HOME"] = str(settings.home)  # the task's own process: nothing else reads these
        os.environ.pop(ENGINE_URL_VARIABLE, None)
        if remote:
            os.environ[ENGINE_URL_VARIABLE] = remote
        module = importlib.import_module(COMMANDS[self.job.replace("_", "-")][0])
        log.info("featurehouse %s on the %s engine: %s", self.job, "remote" if remote else f"{settings.home}", args)
        errors = ErrorLines(sys.stderr)
        with redirect_stderr(errors):
            code = module.main([*args, "--engine", "auto"])
        if code:
            self._fail(context, code, errors.last or f"exit code {code}")

    def _submit(self, context: Any, settings: Settings, local: bool) -> None:
        from warehouse.confs import LOOPBACK

        python_bin = str(Path(sys.executable).parent)
        self.env_vars = {
            **(self.env_vars or {}),
            "FEATUREHOUSE_HOME": str(settings.home),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": f"{python_bin}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-submit of this environment
            **({"SPARK_LOCAL_IP": LOOPBACK} if local else {}),  # a local driver's UI on the loopback (warehouse.confs)
        }
        try:
            super().execute(context)
        except AirflowException as err:
            text = str(err)
            code = re.search(r"Error code is: (\d+)", text)
            self._fail(context, int(code.group(1)) if code else None, _error_line(text) or text.splitlines()[0])


class ErrorLines:
    """A text stream that passes everything on and keeps the last ``error: ...`` line a command printed."""

    def __init__(self, target: Any) -> None:
        self.target, self.last = target, None

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip().startswith("error: "):
                self.last = line.strip()[len("error: "):]
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()


def engine_of(settings: Settings) -> str | None:
    """Where a featurehouse command of a task runs: a remote engine's URL, "" for the data folder's own engine, or
    None for spark-submit (a master other than local, or a metastore of the Variables' own)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        engine = BaseHook.get_connection(ENGINE_CONN_ID)
    except AirflowNotFoundException:
        engine = None
    if engine is not None and engine.port:
        return SparkConnectHook(ENGINE_CONN_ID).get_connection_url()
    from warehouse.session import uses_engine

    master = BaseHook.get_connection(SPARK_CONN_ID).host or ""
    return "" if master.startswith("local") and uses_engine("auto", None, settings.spark_conf) else None
