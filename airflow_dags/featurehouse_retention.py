"""``featurehouse_retention``: drop partitions older than each dataset's retention, then vacuum.

``spark-submit etl/maintenance/retention.py --as-of DS --dry-run|--apply``: every dataset whose registry sets
``retention`` (e.g. ``retention: 365d``) loses the partitions of its feature and quarantine tables
older than the ds minus that. By default it only lists what it would remove; a run triggered with
``{"dry_run": false}``, or every run once the Variable ``featurehouse_retention_apply`` is "true",
removes them. Delta's VACUUM keeps removed files for the table's file retention (7 days by
default), so a reader pinned to an older snapshot keeps working until then.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_dags.common import START, FeaturehouseJob, default_args

with DAG(
    dag_id="featurehouse_retention",
    description="drop expired partitions and vacuum (dry run unless told)",
    schedule="@daily",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    params={"dry_run": Param(True, type="boolean", description="only list what would be removed")},
    default_args=default_args(),
    tags=["featurehouse"],
    doc_md=__doc__,
) as dag:
    FeaturehouseJob(
        task_id="retention",
        job="retention",
        application_args=[
            "--as-of", "{{ ds }}",
            "{{ '--apply' if not params.dry_run or var.value.get('featurehouse_retention_apply', '') | lower == 'true' "
            "else '--dry-run' }}",
        ],  # fmt: skip
    )
