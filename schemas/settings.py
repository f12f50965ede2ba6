"""Names of the Spark and Delta settings that more than one part of featurehouse reads or writes."""

from __future__ import annotations

#: The metastore database a session's Hive client opens (embedded Derby by default, PostgreSQL on a cluster).
METASTORE_URL = "spark.hadoop.javax.jdo.option.ConnectionURL"
#: The Delta table property that makes a table's columns renameable and droppable without rewriting files.
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
