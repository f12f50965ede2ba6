"""Arrow schemas of the feature tables, derived from the registry (for the reader)."""

from __future__ import annotations

import pyarrow as pa

from schemas.registry import DatasetRegistry, DType, Feature, Kind


def feature_type(feature: Feature) -> pa.DataType:
    """The Arrow type of one feature column, matching what Spark writes to Parquet."""
    if feature.kind is Kind.DENSE:
        return pa.float32() if feature.dtype is DType.FLOAT32 else pa.float64()
    if feature.kind is Kind.SPARSE:
        return pa.list_(pa.field("element", pa.int64()))
    return pa.list_(pa.field("element", pa.struct([pa.field("id", pa.int64()), pa.field("weight", pa.float32())])))


def table_schema(registry: DatasetRegistry) -> pa.Schema:
    """The feature table as Arrow sees it: keys, labels, features, ds."""
    fields = [
        pa.field("impression_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64()),
        pa.field("item_id", pa.int64()),
        pa.field("event_time", pa.timestamp("us", tz="UTC")),
    ]
    fields += [pa.field(label.column, pa.int32(), nullable=False) for label in registry.labels]
    fields += [pa.field(f.name, feature_type(f)) for f in registry.stored_features]
    fields.append(pa.field("ds", pa.string(), nullable=False))
    return pa.schema(fields)
