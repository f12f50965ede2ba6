"""Spark settings: what a featurehouse session is configured with, and settings changed for a block.

The embedded default is local Spark, an embedded Derby metastore and the warehouse under one data
folder (``schemas.paths.default_home``). Every setting is a plain Spark conf and can be overridden
with ``--conf k=v``, so the same code runs with spark-submit on a cluster against a shared metastore.
:func:`session_confs` is the one place they are put together; :func:`spark_submit_args` gives the
same settings as spark-submit arguments. Starting a session from them is ``warehouse.session``'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from schemas.errors import ConfigError
from schemas.paths import REPO_ROOT, warehouse_location
from schemas.redact import REDACTED, SECRET_KEY
from schemas.settings import METASTORE_URL
from warehouse import cds
from warehouse.cds import merge_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
        # the UI shows plans and settings; its kill links would let anyone who reaches it stop a job
        "spark.ui.killEnabled": "false",
        # Constraint propagation (InferFiltersFromConstraints) is exponential in a projection's aliases: on the
        # engine, the statistics' aggregate over a day's 91 features, planned while another client's join ran,
        # filled the 4g heap with And/Not/Coalesce trees for over 10 minutes (jstack: Project.getAllValidConstraints)
        # and never reached a Spark job. What it infers are filters (IS NOT NULL, equalities carried across a join);
        # the jobs filter on ds themselves, and that filter is pushed down without it
        "spark.sql.constraintPropagation.enabled": "false",
    }


#: Where a local Spark (``local[*]``) listens: its driver RPC, block manager and UI, on the loopback only. Spark
#: would otherwise bind the machine's external address (its hostname resolves to a loopback address, so it warns
#: and picks another interface), and its UI binds ``SPARK_LOCAL_IP`` or every interface, whatever
#: ``spark.driver.bindAddress`` says: :func:`loopback_environment` sets that variable for the JVM this process
#: launches. A cluster's driver must be reachable by its executors: profiles for clusters set their own addresses.
LOOPBACK = "127.0.0.1"
LOOPBACK_CONFS = {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}


def loopback_environment(confs: Mapping[str, str]) -> None:
    """Before this process launches a local Spark's JVM: its UI binds the loopback (``SPARK_LOCAL_IP``)."""
    if confs.get("spark.master", "").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)


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
        if confs.get("spark.master", "").startswith("local"):
            confs = {**LOOPBACK_CONFS, **confs}  # a profile's or a --conf's own address wins
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



@contextmanager
def runtime_confs(spark: SparkSession, confs: Mapping[str, str], *, keep_set: bool = False) -> Iterator[None]:
    """``confs`` set on the session while the block runs, each key's earlier value (or its absence) restored after.

    ``keep_set``: a key the session already sets (a user's ``--conf``) keeps its value.
    """
    previous = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        if not (keep_set and previous[key] is not None):
            spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


#: Spark SQL settings for a job whose input is below :data:`SMALL_INPUT_BYTES`: its plans run interpreted and
#: without adaptive execution. Both are fixed costs of every query that pay for themselves only on enough rows:
#:
#: * compiling generated code (whole-stage code and each projection's class, with Janino): some 15% of a
#:   100-impression label join's driver time by a JFR profile. Measured 2026-12-04 (3 runs in a started session,
#:   medians): a 100-impression day 8.2 s against 10.0 s compiled, a 20,000-impression day (about 63 MB of
#:   landing JSON with the demo's registry) 21.0 s against 23.4 s;
#: * adaptive query execution (AQE), which runs every shuffle stage as a Spark job of its own to re-plan the rest
#:   from its output: a 100-impression day's label join ran 37 Spark jobs with it and 22 without, in 6.9 s against
#:   5.7 s; a 20,000-impression day 17.1 s (38 jobs) against 14.9 s (21) (2026-12-06, third run in a started
#:   session). Without it a shuffle has ``spark.sql.shuffle.partitions`` partitions (8 on the embedded default)
#:   and joins are planned from the inputs' size estimates.
#:
#: Not raised past 64 MiB: at 80,000 impressions (248 MB of landing JSON) the join without statistics ran faster
#: with both off (22.1 s against 23.0 s, ``bench/label_join.py`` medians of 3, 2026-12-06), but the default join,
#: with the statistics, ran slower (37.4 s against 31.4 s: the statistics' aggregate, 15.1 s against 9.8 s, is
#: the query that gains most from generated code).
#:
#: The results are the same: the interpreted expressions are the ones the code is generated from, and AQE
#: changes how a plan is run, not what it computes. Larger inputs were not measured, so they keep both.
SMALL_INPUT_CONFS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}
SMALL_INPUT_BYTES = 64 * 2**20


def input_size_confs(input_bytes: int) -> dict[str, str]:
    """The settings a job reading ``input_bytes`` runs under: :data:`SMALL_INPUT_CONFS` for a small input, else none."""
    return dict(SMALL_INPUT_CONFS) if input_bytes < SMALL_INPUT_BYTES else {}
