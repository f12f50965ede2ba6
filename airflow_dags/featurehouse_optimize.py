"""``featurehouse_optimize``: weekly, order a dataset's feature columns by popularity and rewrite recent partitions.

``spark-submit etl/maintenance/optimize.py --dataset DATASET --order popularity --from DS-27 --to DS``: the
table's feature columns are ordered by how many jobs read each in the last 30 days (the catalog's
``feature_popularity``; a metadata change), then each of the last 28 days' partitions whose files are not
in that order is rewritten, one verified Delta commit per partition. Partitions already in order (every
new one, since the label join writes in the table's order) are skipped, so a week with no change in
popularity writes nothing; older partitions keep their files and read the same. Readers pinned to an
older snapshot keep working until VACUUM (the retention DAG) passes the table's file retention.

Run it where no label join writes the same days (Sunday 03:00 UTC, after the daily DAG's midnight run);
``days`` widens the window for a one-off run (``{"days": 365}``).
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_dags.common import START, FeaturehouseJob, dataset_param, default_args

with DAG(
    dag_id="featurehouse_optimize",
    description="order feature columns by popularity; rewrite recent partitions to follow it (verified)",
    schedule="0 3 * * 0",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    params={
        "dataset": dataset_param("the dataset whose table is ordered"),
        "days": Param(28, type="integer", minimum=1, description="partitions of the last this many days are rewritten"),
    },
    default_args=default_args(),
    tags=["featurehouse"],
    doc_md=__doc__,
) as dag:
    FeaturehouseJob(
        task_id="optimize",
        job="optimize",
        application_args=[
            "--dataset", "{{ params.dataset }}", "--order", "popularity",
            "--from", "{{ macros.ds_add(ds, 1 - params.days) }}", "--to", "{{ ds }}",
        ],  # fmt: skip
    )
