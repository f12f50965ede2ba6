"""``featurehouse_streaming``: every hour, the available-now stream catches up with what has landed.

``featurehouse stream --dataset D --source files --trigger available-now`` (on the embedded default a
client of the data folder's engine, by spark-submit on a cluster): it stages the files that arrived
since the last run (exactly once, by its checkpoint), publishes the days whose windows have closed
through the quality gate, and stops. One run at a time; a missed hour is not
caught up separately (the next run reads everything new).
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_dags.common import START, FeaturehouseJob, dataset_param, default_args

with DAG(
    dag_id="featurehouse_streaming",
    description="the available-now label-join stream, hourly",
    schedule="@hourly",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    params={"dataset": dataset_param("the dataset to stream")},
    default_args=default_args(),
    tags=["featurehouse"],
    doc_md=__doc__,
) as dag:
    FeaturehouseJob(
        task_id="stream",
        job="stream",
        application_args=["--dataset", "{{ params.dataset }}", "--source", "files", "--trigger", "available-now"],
        reads_landing=True,
    )
