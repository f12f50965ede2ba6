"""Starting a SparkSession for featurehouse: Delta and Hive support, embedded by default.

The settings come from ``warehouse.confs`` (:func:`~warehouse.confs.session_confs`); this module
starts a session with them: it checks first that an embedded metastore is free, and
:func:`spark_session` is the context manager jobs use. The builder helper takes and returns a
builder (as Delta's ``configure_spark_with_delta_pip`` does).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from schemas.errors import ConfigError
from schemas.paths import default_home
from schemas.settings import METASTORE_URL
from warehouse.confs import embedded_confs, loopback_environment, session_confs, submitted_confs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (on an engine), not a classic one with a JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def configure_builder(builder: SparkSession.Builder, confs: Mapping[str, str]) -> SparkSession.Builder:
    """Apply ``confs`` to a SparkSession builder and return it."""
    for key, value in confs.items():
        builder = builder.config(key, value)
    return builder


def quiet_query_context_logs() -> None:
    """Stop pyspark from logging every failed query as a JSON record to stderr.

    The exception still propagates; the CLI prints its message once, as one line.
    """
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


#: How long a command waits for the embedded metastore's lock: the JVM of the command before it (a shell
#: script's previous line) can outlive its Python process by a moment, still holding the lock.
LOCK_WAIT_S = 10.0


def opens_embedded_metastore(home: Path, confs: Mapping[str, str]) -> bool:
    """Whether a session with ``confs`` opens ``home``'s embedded Derby metastore: it has the Hive catalog (the
    streaming job has none, and addresses its tables by path) and no metastore of its own."""
    return confs.get("spark.sql.catalogImplementation") == "hive" and \
        confs.get(METASTORE_URL) == embedded_confs(home)[METASTORE_URL]


def check_metastore_free(home: Path, confs: Mapping[str, str]) -> None:
    """Refuse, clearly, to start a second JVM on an embedded Derby metastore another JVM holds (after
    waiting up to ``LOCK_WAIT_S`` for it to be released).

    Derby admits one JVM per database and holds an OS file lock on ``metastore_db/dbex.lck``
    while booted; without this check the second JVM fails deep in Hive with a long Java trace.
    A metastore configured elsewhere (another ConnectionURL) is not checked.
    """
    if not opens_embedded_metastore(home, confs):
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


def make_way_for_classic(home: Path, confs: Mapping[str, str], engine: str | None) -> None:
    """No engine may hold the embedded metastore a classic session is about to open (``client.make_way``)."""
    from warehouse.engine.client import make_way
    from warehouse.engine.state import INSIDE_ENGINE, EngineFiles

    if INSIDE_ENGINE in os.environ or not opens_embedded_metastore(home, confs):
        return  # the stream, say, never opens it: it runs beside the engine
    make_way(EngineFiles(home), chosen_off=engine == "off")


def uses_engine(engine: str | None, remote: str | None, conf: Mapping[str, str]) -> bool:
    """Whether a command runs on an engine: a profile's remote one, or (``auto``) the home's on the embedded default.

    ``off``, None (a command that is not an engine client yet), spark-submit and any other master or metastore keep
    the classic in-process session.
    """
    if remote is not None:
        return True
    if engine != "auto" or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    return embedded_default(conf)


def embedded_default(conf: Mapping[str, str]) -> bool:
    """Whether settings leave a command on the embedded default: a local master and no metastore given."""
    return conf.get("spark.master", "local").startswith("local") and METASTORE_URL not in conf


@contextmanager
def spark_session(
    home: Path | None = None, *, conf: Mapping[str, str] | None = None, log_level: str = "ERROR",
    engine: str | None = None, remote: str | None = None,
) -> Iterator[SparkSession]:
    """A SparkSession for featurehouse, stopped (or, on an engine, released) on exit if this call made it.

    An already active session (a test fixture, a notebook) is reused and left running. Otherwise
    ``engine`` ``auto`` (see :func:`uses_engine`) gives a Spark Connect session on the home's engine
    (``warehouse.engine``); ``off`` (the user's choice) or None (a command that is not yet an engine client) a
    classic session in this process (:func:`make_way_for_classic`).

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
    if uses_engine(engine, remote, conf or {}):
        from warehouse.engine.client import engine_session

        with engine_session(home.resolve(), conf or {}, remote=remote) as spark:
            yield spark
        return
    confs = session_confs(home, conf)
    # under spark-submit the settings it was given (its metastore among them) are left out of confs
    effective = {**submitted_confs(), **confs} if "PYSPARK_GATEWAY_PORT" in os.environ else confs
    make_way_for_classic(home.resolve(), effective, engine)
    check_metastore_free(home, effective)
    loopback_environment(confs)
    spark = configure_builder(SparkSession.builder, confs).getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    try:
        yield spark
    finally:
        spark.stop()
