"""Spark schemas derived from the registry and the event formats; nothing is restated.

pyspark is imported inside the functions so that importing ``schemas`` never
needs it (the reader imports ``schemas`` on hosts without a JVM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.registry import DatasetRegistry, DType, Feature, Kind

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

CORRUPT_RECORD_COLUMN = "_corrupt_record"


def feature_type(feature: Feature) -> DataType:
    """The Spark type of one feature column."""
    from pyspark.sql import types as T

    if feature.kind is Kind.DENSE:
        return T.FloatType() if feature.dtype is DType.FLOAT32 else T.DoubleType()
    if feature.kind is Kind.SPARSE:
        return T.ArrayType(T.LongType())
    return T.ArrayType(T.StructType([T.StructField("id", T.LongType()), T.StructField("weight", T.FloatType())]))


def table_schema(registry: DatasetRegistry) -> StructType:
    """The feature table: keys, one int column per label type, one column per feature, ds."""
    from pyspark.sql import types as T

    fields = [
        T.StructField("impression_id", T.StringType(), False),
        T.StructField("user_id", T.LongType(), True),
        T.StructField("item_id", T.LongType(), True),
        T.StructField("event_time", T.TimestampType(), True),
    ]
    fields += [T.StructField(label.column, T.IntegerType(), False) for label in registry.labels]
    fields += [T.StructField(f.name, feature_type(f), True) for f in registry.stored_features]
    fields.append(T.StructField("ds", T.StringType(), False))
    return T.StructType(fields)


def impression_event_schema() -> StructType:
    """One impression-log JSON line, as the serving system writes it::

        {"impression_id": "i-...", "user_id": 7, "item_id": 42, "event_time": "2026-11-01T13:05:02.123Z",
         "dense": {"user_ctr_7d": 0.031}, "sparse": {"user_topics": [3, 17]},
         "weighted_sparse": {"user_item_affinity": [{"id": 5, "weight": 0.7}]}}
    """
    from pyspark.sql import types as T

    weighted = T.ArrayType(T.StructType([T.StructField("id", T.LongType()), T.StructField("weight", T.DoubleType())]))
    return T.StructType(
        [
            T.StructField("impression_id", T.StringType()),
            T.StructField("user_id", T.LongType()),
            T.StructField("item_id", T.LongType()),
            T.StructField("event_time", T.TimestampType()),
            T.StructField("dense", T.MapType(T.StringType(), T.DoubleType())),
            T.StructField("sparse", T.MapType(T.StringType(), T.ArrayType(T.LongType()))),
            T.StructField("weighted_sparse", T.MapType(T.StringType(), weighted)),
            T.StructField(CORRUPT_RECORD_COLUMN, T.StringType()),
        ]
    )


#: The impression log's map of each feature kind.
FEATURE_MAPS = {Kind.DENSE: "dense", Kind.SPARSE: "sparse", Kind.WEIGHTED_SPARSE: "weighted_sparse"}


def impression_record_schema(registry: DatasetRegistry) -> StructType:
    """One impression-log line as the registry implies it: each feature map a struct of the names it logs.

    The same line as :func:`impression_event_schema`, but ``dense``, ``sparse`` and
    ``weighted_sparse`` are structs with one field per name under which a stored, logged feature
    of the registry may arrive (new and old names), so that the JSON parser writes each feature
    straight into its own field: no per-record map, no lookups. Values under other names are
    skipped, not parsed (their names are counted from the keys alone by the label join).
    """
    from pyspark.sql import types as T

    event = {field.name: field for field in impression_event_schema().fields}
    fields = [event[name] for name in ("impression_id", "user_id", "item_id", "event_time")]
    for kind, column in FEATURE_MAPS.items():
        value_type = event[column].dataType.valueType
        keys = sorted({key for f in registry.logged_features if f.kind is kind for key in f.log_keys})
        fields.append(T.StructField(column, T.StructType([T.StructField(key, value_type) for key in keys])))
    fields.append(event[CORRUPT_RECORD_COLUMN])
    return T.StructType(fields)


def label_event_schema() -> StructType:
    """One label-log JSON line: ``{"impression_id": "i-...", "label_type": "click", "event_time": "..."}``."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("impression_id", T.StringType()),
            T.StructField("label_type", T.StringType()),
            T.StructField("event_time", T.TimestampType()),
            T.StructField(CORRUPT_RECORD_COLUMN, T.StringType()),
        ]
    )
