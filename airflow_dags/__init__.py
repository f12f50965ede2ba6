"""Airflow DAG files: thin wiring of the jobs."""
