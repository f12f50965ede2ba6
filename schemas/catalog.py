"""The feature catalog's tables, defined once (as Arrow schemas) for Spark and for JVM-free writers.

Four Delta tables in the metastore database ``featurehouse_catalog``:

* ``features``: one row per dataset and feature, synced from the registry;
* ``feature_stats``: one row per dataset, ds and feature, computed from the data
  (partitioned by ds);
* ``feature_usage``: one row per training-job run: what it read. The reader
  appends to it without a JVM (``ingest/usage.py``), so its schema is Arrow here
  and Spark's is converted from it;
* ``quality_gate``: one row per decision of the quality gate on a staged partition:
  published, refused, or forced by someone, with why.
"""

from __future__ import annotations

import pyarrow as pa

CATALOG_DATABASE = "featurehouse_catalog"

FEATURES = "features"
FEATURE_STATS = "feature_stats"
FEATURE_USAGE = "feature_usage"
QUALITY_GATE = "quality_gate"

#: Quantiles kept for dense features, and their column names.
DENSE_QUANTILES: tuple[tuple[str, float], ...] = (("p01", 0.01), ("p25", 0.25), ("p50", 0.5), ("p75", 0.75), ("p99", 0.99))
#: Quantiles of a sparse feature's list length.
LENGTH_QUANTILES: tuple[tuple[str, float], ...] = (("len_p50", 0.5), ("len_p99", 0.99))

_TS = pa.timestamp("us", tz="UTC")

FEATURES_SCHEMA = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("feature", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("dtype", pa.string(), nullable=False),
        pa.field("default_value", pa.string()),  # JSON; null when the registry gives none
        pa.field("owner", pa.string()),
        pa.field("description", pa.string()),
        pa.field("status", pa.string(), nullable=False),  # active | deprecated | dropped
        pa.field("added_ds", pa.date32()),
        pa.field("deprecated_ds", pa.date32()),
        pa.field("renamed_from", pa.string()),
        pa.field("derived", pa.string()),  # the Spark SQL expression of a derived feature
        pa.field("registry_file", pa.string(), nullable=False),
        pa.field("updated_at", _TS, nullable=False),  # when this row's content last changed
    ]
)

FEATURE_STATS_SCHEMA = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("feature", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("table_version", pa.int64(), nullable=False),  # the Delta version the stats describe
        pa.field("rows", pa.int64(), nullable=False),  # rows of the partition
        pa.field("non_null", pa.int64(), nullable=False),
        pa.field("coverage", pa.float64()),  # non_null / rows
        # dense features: over non-null values
        pa.field("min", pa.float64()),
        pa.field("max", pa.float64()),
        pa.field("mean", pa.float64()),
        pa.field("stddev", pa.float64()),  # sample standard deviation
        *[pa.field(name, pa.float64()) for name, _q in DENSE_QUANTILES],  # approximate
        # sparse and weighted sparse features: over non-null lists
        pa.field("len_mean", pa.float64()),
        *[pa.field(name, pa.float64()) for name, _q in LENGTH_QUANTILES],  # approximate
        pa.field("approx_distinct_ids", pa.int64()),  # HyperLogLog++
        # every feature: compressed bytes of the column in the partition's files, from the Parquet footers
        pa.field("bytes_on_disk", pa.int64(), nullable=False),
        pa.field("computed_at", _TS, nullable=False),
        pa.field("ds", pa.string(), nullable=False),  # partition column
    ]
)

FEATURE_USAGE_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("ds_from", pa.string(), nullable=False),
        pa.field("ds_to", pa.string(), nullable=False),
        pa.field("features", pa.list_(pa.field("element", pa.string())), nullable=False),
        pa.field("bytes_read", pa.int64(), nullable=False),
        pa.field("rows_read", pa.int64(), nullable=False),
        pa.field("table_version", pa.int64(), nullable=False),
        pa.field("started_at", _TS, nullable=False),
        pa.field("ended_at", _TS, nullable=False),
        # what the read cost (null in rows written before these columns existed)
        pa.field("batches", pa.int64()),
        pa.field("bytes_all_columns", pa.int64()),  # what the same rows cost with every column
        pa.field("io_s", pa.float64()),  # seconds in file reads
        pa.field("decode_s", pa.float64()),  # Parquet decoding
        pa.field("transform_s", pa.float64()),
        pa.field("batching_s", pa.float64()),  # shuffling and cutting batches
        pa.field("wait_s", pa.float64()),  # the consumer waiting for batches
        # a training run's own (featurehouse train)
        pa.field("compute_s", pa.float64()),  # forward, backward and optimizer steps
        pa.field("samples_per_s", pa.float64()),  # training samples per second of waiting plus computing
        pa.field("stall_fraction", pa.float64()),  # waiting / (waiting + computing)
    ]
)

QUALITY_GATE_SCHEMA = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("ds", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),  # the label join that staged the partition
        pa.field("decision", pa.string(), nullable=False),  # published | refused | forced
        pa.field("staging_table", pa.string(), nullable=False),  # dropped once published; kept while refused
        pa.field("expectations", pa.int64(), nullable=False),
        pa.field("failed_expectations", pa.list_(pa.field("element", pa.string())), nullable=False),  # one line each
        pa.field("rows", pa.int64(), nullable=False),  # rows of the staged partition
        pa.field("quarantined_impressions", pa.int64()),  # bad records of the run (null for a later publish)
        pa.field("quarantined_labels", pa.int64()),
        pa.field("table_version", pa.int64()),  # the feature table's Delta version published; null when refused
        pa.field("decided_by", pa.string(), nullable=False),  # the gate, or who forced it
        pa.field("reason", pa.string()),  # why it was forced
        pa.field("report_path", pa.string()),  # the JSON report of the validation
        pa.field("decided_at", _TS, nullable=False),
    ]
)

#: table name -> (schema, partition columns)
CATALOG_TABLES: dict[str, tuple[pa.Schema, tuple[str, ...]]] = {
    FEATURES: (FEATURES_SCHEMA, ()),
    FEATURE_STATS: (FEATURE_STATS_SCHEMA, ("ds",)),
    FEATURE_USAGE: (FEATURE_USAGE_SCHEMA, ()),
    QUALITY_GATE: (QUALITY_GATE_SCHEMA, ()),
}


def managed_table_uri(warehouse_dir: str, database: str, table: str) -> str:
    """Where a managed table's files live in the Hive layout: ``<warehouse>/<database>.db/<table>``.

    For readers without a metastore (``ingest/``); the warehouse folder is
    ``<home>/warehouse`` on the embedded default.
    """
    from schemas.names import validate_name

    return f"{str(warehouse_dir).rstrip('/')}/{validate_name('database', database)}.db/{validate_name('table', table)}"


def catalog_table_uri(warehouse_dir: str, name: str) -> str:
    """Where a catalog table's Delta files live (see :func:`managed_table_uri`)."""
    catalog_table(name)  # validates the name
    return managed_table_uri(warehouse_dir, CATALOG_DATABASE, name)


def catalog_table(name: str) -> str:
    """The metastore name of a catalog table, e.g. ``featurehouse_catalog.features``."""
    if name not in CATALOG_TABLES:
        raise ValueError(f"{name!r} is not a catalog table; use one of {', '.join(CATALOG_TABLES)}")
    return f"{CATALOG_DATABASE}.{name}"
