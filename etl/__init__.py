"""Spark jobs: batch label join, log generator; each runnable by spark-submit."""
