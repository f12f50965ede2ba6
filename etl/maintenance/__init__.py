"""Table-maintenance jobs: publish a refused partition, apply registry changes, backfill, retention, catalog."""
