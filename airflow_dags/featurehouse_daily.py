"""``featurehouse_daily``: each ds waits for its logs and closed label windows, then joins, validates, publishes.

    wait_impressions ─┐
                      ├─> label_join
    wait_labels ──────┘

* The ds is the run's logical date (UTC): the scheduled run of 2026-11-03 joins ds 2026-11-03.
  It starts at 00:00 that day and its sensors wait, in reschedule mode (no worker slot held),
  until the impressions of the ds and every label partition through the day its longest
  attribution window closes (ds + 3 days for ``ads``) carry ``_SUCCESS``.
* ``label_join`` is ``spark-submit etl/label_join.py --dataset D --ds DS``, the command-line job.
  A ds the quality gate refuses fails the run at once (no retry) with the job's message, which
  names the gate's report; the rows wait in staging for ``featurehouse publish``.
  The join also writes the published partition's statistics into the feature catalog
  (``featurehouse_catalog.feature_stats``), from its own rows: one Spark task per ds.

Every step replaces what a previous try of the same ds wrote, so a rerun or retry leaves one copy.
Catchup is on from ``$FEATUREHOUSE_DAILY_START`` (default 2026-11-01).
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from airflow_dags.common import FeaturehouseJob, dataset_param, default_args, env_date, env_seconds, landing_ready

POKE_S = env_seconds("FEATUREHOUSE_SENSOR_POKE_S", 600)
TIMEOUT_S = env_seconds("FEATUREHOUSE_SENSOR_TIMEOUT_S", 7 * 24 * 3600)

with DAG(
    dag_id="featurehouse_daily",
    description="label-join, validate and publish one ds once its logs and label windows are closed",
    schedule="@daily",
    start_date=env_date("FEATUREHOUSE_DAILY_START", "2026-11-01"),
    end_date=env_date("FEATUREHOUSE_DAILY_END", None),
    catchup=True,
    max_active_runs=8,
    params={"dataset": dataset_param("the dataset to join")},
    default_args=default_args(),
    tags=["featurehouse"],
    doc_md=__doc__,
) as dag:

    @task.sensor(poke_interval=POKE_S, timeout=TIMEOUT_S, mode="reschedule")
    def wait_impressions(**context):
        return landing_ready("impressions", context)

    @task.sensor(poke_interval=POKE_S, timeout=TIMEOUT_S, mode="reschedule")
    def wait_labels(**context):
        return landing_ready("labels", context)

    join = FeaturehouseJob(
        task_id="label_join",
        job="label_join",
        application_args=["--dataset", "{{ params.dataset }}", "--ds", "{{ ds }}"],
        reads_landing=True,
    )
    [wait_impressions(), wait_labels()] >> join
