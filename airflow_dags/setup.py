"""Create what the featurehouse DAGs need in Airflow's metadata database; safe to run again.

    airflow db migrate
    python -m airflow_dags.setup

* The pool ``featurehouse_spark``, whose slots are how many Spark tasks may run at once: the
  Variable ``featurehouse_spark_slots`` (default 1). On the embedded default (a ``local`` master,
  no metastore of the Variables' own) every Spark task is a client of the data folder's engine,
  which holds the embedded Derby metastore for all of them, so any number of slots is safe. With
  a cluster's master the jobs are spark-submitted, each a JVM of its own, and embedded Derby admits
  one: more than one slot is refused there unless ``featurehouse_spark_conf`` points the jobs at a
  shared metastore (``spark.hadoop.javax.jdo.option.ConnectionURL``). Run this again after
  changing either.
* The Spark Connection ``featurehouse_spark`` (master ``local[*]``), unless it exists: edit it to
  point the jobs at a cluster, e.g. ``airflow connections add featurehouse_spark --conn-type spark
  --conn-host spark://spark-master:7077`` after deleting the default one. On a ``local`` master the
  jobs run on the data folder's engine; elsewhere by spark-submit.
* The Spark Connect Connection ``featurehouse_engine`` (host ``sc://127.0.0.1``, no port: the data
  folder's own engine, found under ``<home>/engine/``), unless it exists. Give it a port, and the
  token as its password, to make the jobs clients of a remote engine (``airflow_dags.common.FeaturehouseJob``).
  Write the host as ``sc://HOST``: the provider's hook turns a bare ``localhost`` plus a port into ``sc:/``.
"""

from __future__ import annotations

import sys

from airflow_dags.common import ENGINE_CONN_ID, SPARK_CONN_ID, SPARK_POOL, parse_spark_conf
from schemas.settings import METASTORE_URL



def pool_slots(slots_text: str | None, spark_conf_text: str | None, master: str) -> int:
    """The pool's size from the Variables' text, refusing more than one slot where spark-submitted jobs (a master
    other than ``local``) would share the embedded metastore."""
    try:
        slots = int(slots_text or 1)
    except ValueError as err:
        raise SystemExit(f"Variable featurehouse_spark_slots={slots_text!r} is not a whole number, e.g. 1") from err
    if slots < 1:
        raise SystemExit(f"Variable featurehouse_spark_slots={slots} must be at least 1")
    try:
        shared = METASTORE_URL in parse_spark_conf(spark_conf_text)
    except ValueError as err:
        raise SystemExit(str(err)) from err
    if slots > 1 and not shared and not master.startswith("local"):
        raise SystemExit(
            f"Variable featurehouse_spark_slots={slots}, but the jobs are spark-submitted to {master} and use the "
            "embedded Derby metastore, which admits one Spark application at a time; set featurehouse_spark_conf to "
            f"a shared metastore ({METASTORE_URL}) first, or keep 1 slot"
        )
    return slots


def main() -> int:
    from airflow.models.connection import Connection
    from airflow.models.pool import Pool
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        existing = session.query(Connection).filter(Connection.conn_id == SPARK_CONN_ID).one_or_none()
        slots = pool_slots(Variable.get("featurehouse_spark_slots", default_var=None),
                           Variable.get("featurehouse_spark_conf", default_var=None),
                           existing.host if existing is not None else "local[*]")  # fmt: skip
        Pool.create_or_update_pool(SPARK_POOL, slots, "featurehouse Spark jobs: one per slot", include_deferred=False)
        print(f"pool {SPARK_POOL}: {slots} slot(s)")
        if existing is None:
            session.add(Connection(conn_id=SPARK_CONN_ID, conn_type="spark", host="local[*]",
                                   description="Spark master of the featurehouse jobs"))  # fmt: skip
            print(f"connection {SPARK_CONN_ID}: created, master local[*]")
        else:
            print(f"connection {SPARK_CONN_ID}: kept, master {existing.host}")
        engine = session.query(Connection).filter(Connection.conn_id == ENGINE_CONN_ID).one_or_none()
        if engine is None:
            # no port: the data folder's own engine, whose port and token change at each start (<home>/engine/)
            session.add(Connection(conn_id=ENGINE_CONN_ID, conn_type="spark_connect", host="sc://127.0.0.1",
                                   description="the featurehouse engine the jobs are clients of: without a port, "
                                   "the data folder's own; with one (and the token as password), a remote one"))  # fmt: skip
            print(f"connection {ENGINE_CONN_ID}: created, the data folder's own engine")
        else:
            where = f"{engine.host}:{engine.port}" if engine.port else "the data folder's own engine"
            print(f"connection {ENGINE_CONN_ID}: kept, {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
