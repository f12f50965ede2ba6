"""The reader: job spec -> Delta snapshot -> projected Parquet reads -> torch batches (never Spark)."""
