"""``featurehouse_backfill``: triggered by hand, for a range of ds.

    airflow dags trigger featurehouse_backfill --conf '{"dataset": "ads", "start": "2026-11-01", "end": "2026-11-05"}'
    airflow dags trigger featurehouse_backfill --conf '{"dataset": "ads", "feature": "item_ctr_7d_log",
                                                        "start": "2026-11-01", "end": "2026-11-05"}'

* With ``feature``: ``spark-submit etl/maintenance/backfill.py``, which fills that derived feature into the
  range's partitions, one verified Delta commit each (partitions already filled are skipped), and
  recomputes the catalog statistics of the partitions it rewrote.
* Without: the label join is run again for every ds of the range (one mapped task per ds, each
  replacing its partition and its catalog statistics).

Every Spark task takes the Spark pool's slot, so on the embedded metastore the ds run one by one.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_dags.common import SPARK_POOL, START, FeaturehouseJob, dataset_param, default_args

#: The longest range one trigger may ask for.
MAX_DAYS = 366

with DAG(
    dag_id="featurehouse_backfill",
    description="backfill a derived feature, or re-run the label join, over a range of ds",
    schedule=None,
    start_date=START,
    catchup=False,
    params={
        "dataset": dataset_param("the dataset"),
        "feature": Param("", type="string", description="a derived feature to backfill; empty: re-run the label join"),
        "start": Param(type="string", format="date", description="first ds, YYYY-MM-DD"),
        "end": Param(type="string", format="date", description="last ds, YYYY-MM-DD (inclusive)"),
    },
    default_args=default_args(),
    tags=["featurehouse"],
    doc_md=__doc__,
) as dag:

    @task(retries=0)
    def plan(params=None) -> list[str]:
        """The ds of the range, in order; a reversed or too long range fails here, before any Spark."""
        try:
            start, end = dt.date.fromisoformat(params["start"]), dt.date.fromisoformat(params["end"])
        except (TypeError, ValueError) as err:
            raise AirflowFailException(f"start/end must be dates YYYY-MM-DD, got {params['start']!r}, {params['end']!r}") from err
        if end < start:
            raise AirflowFailException(f"end {end} is before start {start}; give the range in order")
        if (end - start).days >= MAX_DAYS:
            raise AirflowFailException(f"{start} .. {end} is over {MAX_DAYS} days; trigger it in shorter ranges")
        return [(start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]

    @task.branch(retries=0)
    def choose(params=None) -> str:
        return "backfill_feature" if params["feature"] else "join_args"

    @task
    def join_args(days: list[str], params=None) -> list[list[str]]:
        return [["--dataset", params["dataset"], "--ds", day] for day in days]

    days = plan()
    backfill_feature = FeaturehouseJob(
        task_id="backfill_feature",
        job="backfill",
        application_args=["--dataset", "{{ params.dataset }}", "--feature", "{{ params.feature }}",
                          "--from", "{{ params.start }}", "--to", "{{ params.end }}"],  # fmt: skip
    )
    joins = join_args(days)
    label_join = FeaturehouseJob.partial(
        task_id="label_join", job="label_join", reads_landing=True, pool=SPARK_POOL  # a mapped task needs it here
    ).expand(application_args=joins)
    days >> choose() >> [backfill_feature, joins]
