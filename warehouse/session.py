"""The one place SparkSessions are built: Delta and Hive support, embedded by default.

Embedded default: local Spark, an embedded Derby metastore and the warehouse under
one data folder (``schemas.paths.default_home``). Every setting is a
plain Spark conf and can be overridden with ``--conf k=v``, so the same code runs
with spark-submit on a cluster against a shared metastore.

The builder helpers take and return a builder (as Delta's
``configure_spark_with_delta_pip`` does); :func:`spark_session` is the context
manager jobs use.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from schemas.errors import ConfigError
from schemas.paths import default_home, warehouse_location
from schemas.redact import REDACTED, SECRET_KEY
from schemas.settings import METASTORE_URL
from warehouse import cds
from warehouse.cds import merge_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Where ``make jars`` puts the Delta jars that the pyspark wheel lacks.
DEFAULT_JARS_DIR = REPO_ROOT / ".jvm" / "jars"
#: The driver JVM's options: the embedded default's, the class-data archive's and the user's, merged.
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: Spark puts these before the driver's extraJavaOptions: where the class-data archive's option goes.
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
#: The Delta package for pyspark 4.2 (keep in step with jvm/pom.xml and pyproject.toml).
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"


def parse_conf_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """Turn ``["k=v", ...]`` from ``--conf`` flags into a dict; a malformed pair is a ConfigError."""
    confs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            secret = SECRET_KEY.search(pair)  # e.g. "...ConnectionPassword hunter2": show the key, not the rest
            shown = repr(pair[: secret.end()] + REDACTED) if secret else repr(pair)
            raise ConfigError(f"--conf {shown} is not of the form key=value, e.g. --conf spark.sql.shuffle.partitions=4")
        confs[key.strip()] = value
    return confs


def delta_jars(jars_dir: Path | None = None) -> list[str]:
    """The Delta jars resolved by ``make jars`` (see jvm/pom.xml), or [] if there are none."""
    directory = Path(os.environ.get("FEATUREHOUSE_JARS") or jars_dir or DEFAULT_JARS_DIR)
    return sorted(str(p) for p in directory.glob("*.jar"))


def embedded_confs(home: Path) -> dict[str, str]:
    """Spark confs of the embedded default, all under ``home``; each can be overridden.

    The metastore is Derby in ``home/metastore_db`` (one JVM at a time), the
    warehouse ``home/warehouse``. Time is UTC: a ds is a UTC date.
    """
    home = Path(home).resolve()
    return {
        "spark.master": "local[*]",
        "spark.app.name": "featurehouse",
        "spark.driver.memory": "4g",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": warehouse_location(home),
        METASTORE_URL: f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
        JAVA_OPTIONS: f"-Dderby.system.home={home}",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.databricks.delta.snapshotPartitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.structuredLogging.enabled": "false",
    }


#: JDBC drivers a metastore database needs on the driver JVM's own classpath (Hive's metastore client loads
#: them there, not from spark.jars): URL scheme -> jar name pattern in the jar folder (jvm/pom.xml).
METASTORE_DRIVERS = {"jdbc:postgresql:": "postgresql-*.jar"}


def submitted_confs() -> dict[str, str]:
    """The settings spark-submit gave this driver (``--conf``, ``--master``, ...); call only under spark-submit."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # attaches to spark-submit's JVM, so SparkConf() reads its settings
    return dict(SparkConf().getAll())


def metastore_driver_jars(url: str, jars_dir: Path | None = None) -> list[str]:
    """The JDBC driver jars a metastore at ``url`` needs on the driver's classpath ([] for embedded Derby)."""
    directory = Path(os.environ.get("FEATUREHOUSE_JARS") or jars_dir or DEFAULT_JARS_DIR)
    for scheme, pattern in METASTORE_DRIVERS.items():
        if url.startswith(scheme):
            jars = sorted(str(p) for p in directory.glob(pattern))
            if not jars:
                raise ConfigError(f"the metastore {url.split('?')[0]} needs its JDBC driver ({pattern}) in {directory}; "
                                  "run `make jars` (jvm/pom.xml resolves it from Maven Central)")  # fmt: skip
            return jars
    return []


def session_confs(home: Path, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The embedded confs, plus the Delta jars, with ``overrides`` applied last.

    Under spark-submit (detected by ``PYSPARK_GATEWAY_PORT``) the embedded confs are only defaults:
    a setting spark-submit was given (``--master``, ``--conf``) is kept, and Delta comes from its
    ``--jars``/``--packages``. Elsewhere, pass ``spark.jars`` or ``spark.jars.packages`` yourself and
    no local jar folder is needed. A PostgreSQL metastore's JDBC driver is put on the driver's
    classpath (``spark.driver.extraClassPath``), where Hive's metastore client looks for it. A
    ``spark.driver.extraJavaOptions`` of the user's is merged into the embedded one (Derby's home),
    not put in its place; the class-data archive (``warehouse/cds.py``) is named in
    ``spark.driver.defaultJavaOptions``, ahead of the user's own there.
    """
    confs = embedded_confs(home)
    overrides = dict(overrides or {})
    user_java_options = overrides.pop(JAVA_OPTIONS, None)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if under_submit:
        # spark-submit already launched the driver JVM with its own master, memory, options and settings.
        for key in ("spark.master", "spark.driver.memory", JAVA_OPTIONS):
            confs.pop(key)
        submitted = submitted_confs()
        confs = {k: v for k, v in confs.items() if k not in submitted}
    elif not {"spark.jars", "spark.jars.packages"} & overrides.keys():
        jars = delta_jars()
        if not jars:
            raise ConfigError(
                f"no Delta jars in {DEFAULT_JARS_DIR}; run `make jars` (resolves {DELTA_PACKAGE} from Maven "
                f"Central once), or pass --conf spark.jars.packages={DELTA_PACKAGE}"
            )
        confs["spark.jars"] = ",".join(jars)
    confs.update(overrides)
    if not under_submit:
        drivers = metastore_driver_jars(confs.get(METASTORE_URL, ""))
        if drivers:
            path = [p for p in confs.get("spark.driver.extraClassPath", "").split(os.pathsep) if p]
            confs["spark.driver.extraClassPath"] = os.pathsep.join(path + [j for j in drivers if j not in path])
        # the user's driver options join the embedded one (Derby's home), last so that theirs win; the class-data
        # archive goes in Spark's default driver options, which come before both
        confs[JAVA_OPTIONS] = merge_java_options(confs.get(JAVA_OPTIONS), user_java_options)
        if archive := cds.java_options(confs):
            confs[DEFAULT_JAVA_OPTIONS] = merge_java_options(archive, confs.get(DEFAULT_JAVA_OPTIONS))
    elif user_java_options is not None:
        confs[JAVA_OPTIONS] = user_java_options  # spark-submit launched the driver; the value is for the record
    return confs


def configure_builder(builder: SparkSession.Builder, confs: Mapping[str, str]) -> SparkSession.Builder:
    """Apply ``confs`` to a SparkSession builder and return it."""
    for key, value in confs.items():
        builder = builder.config(key, value)
    return builder


def spark_submit_args(home: Path, overrides: Mapping[str, str] | None = None) -> list[str]:
    """The same settings as arguments for ``spark-sql``/``spark-submit`` (``--jars ... --conf k=v``)."""
    confs = session_confs(home, overrides)
    args: list[str] = []
    if "spark.master" in confs:
        args += ["--master", confs.pop("spark.master")]
    if "spark.jars" in confs:
        args += ["--jars", confs.pop("spark.jars")]
    if "spark.driver.memory" in confs:
        args += ["--driver-memory", confs.pop("spark.driver.memory")]
    if confs.get(JAVA_OPTIONS):
        args += ["--driver-java-options", confs.pop(JAVA_OPTIONS)]
    for key, value in confs.items():
        args += ["--conf", f"{key}={value}"]
    return args


def quiet_query_context_logs() -> None:
    """Stop pyspark from logging every failed query as a JSON record to stderr.

    The exception still propagates; the CLI prints its message once, as one line.
    """
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


#: How long a command waits for the embedded metastore's lock: the JVM of the command before it (a shell
#: script's previous line) can outlive its Python process by a moment, still holding the lock.
LOCK_WAIT_S = 10.0


def check_metastore_free(home: Path, confs: Mapping[str, str]) -> None:
    """Refuse, clearly, to start a second JVM on an embedded Derby metastore another JVM holds (after
    waiting up to ``LOCK_WAIT_S`` for it to be released).

    Derby admits one JVM per database and holds an OS file lock on ``metastore_db/dbex.lck``
    while booted; without this check the second JVM fails deep in Hive with a long Java trace.
    A metastore configured elsewhere (another ConnectionURL) is not checked.
    """
    if confs.get("spark.sql.catalogImplementation") != "hive":
        return  # the session never opens the metastore (the streaming job addresses its tables by path)
    if confs.get(METASTORE_URL) != embedded_confs(home)[METASTORE_URL]:
        return
    from pyspark import SparkContext

    if SparkContext._gateway is not None:  # a JVM of this process may hold the lock: locks are per process, and
        return  # closing the file here would release it; a second session in one JVM is Spark's own business
    lock = Path(home).resolve() / "metastore_db" / "dbex.lck"
    if not lock.exists():
        return
    with lock.open("rb+") as handle:
        # held: the previous command's JVM may still be exiting, so try again every 0.25 s for LOCK_WAIT_S
        retrying = Retrying(stop=stop_after_delay(LOCK_WAIT_S), wait=wait_fixed(0.25),
                            retry=retry_if_exception_type(OSError), reraise=True)  # fmt: skip
        try:
            retrying(fcntl.lockf, handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            raise ConfigError(
                f"the embedded metastore {lock.parent} is in use by another Spark application: embedded Derby "
                "admits one JVM at a time; wait for that job to finish, give this one its own --home, or point "
                "every job at a shared metastore (--conf spark.hadoop.javax.jdo.option.ConnectionURL=..., see "
                "the README)"
            ) from err
        fcntl.lockf(handle, fcntl.LOCK_UN)


@contextmanager
def spark_session(
    home: Path | None = None, *, conf: Mapping[str, str] | None = None, log_level: str = "ERROR"
) -> Iterator[SparkSession]:
    """A SparkSession for featurehouse, stopped on exit if this call started it.

    An already active session (a test fixture, a notebook) is reused and left running.

    >>> with spark_session(Path("data"), conf={"spark.sql.shuffle.partitions": "2"}) as spark:  # doctest: +SKIP
    ...     spark.sql("SHOW DATABASES").show()
    """
    from pyspark.sql import SparkSession

    quiet_query_context_logs()
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    home = Path(home) if home is not None else default_home()
    home.mkdir(parents=True, exist_ok=True)
    confs = session_confs(home, conf)
    check_metastore_free(home, confs)
    spark = configure_builder(SparkSession.builder, confs).getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    try:
        yield spark
    finally:
        spark.stop()
