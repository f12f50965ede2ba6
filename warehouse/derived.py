"""Derived features: Spark SQL expressions from the registry, evaluated on write and by backfill.

A derived feature (``derived: log1p(item_ctr_7d)``) sees the key columns and the
features defined before it in the registry, never the labels: evaluating it on rows
without label columns makes a leak impossible rather than merely checked.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from schemas.errors import RegistryError
from schemas.exit import first_line
from schemas.registry import DatasetRegistry, Feature
from schemas.spark import feature_type, table_schema
from schemas.sql_text import literal


#: ``ds`` of :func:`populated`: each row's own ``ds`` column (a stream's rows span days).
ROW_DS = "row"


def populated(feature: Feature, value: str, ds: dt.date | str) -> str:
    """SQL text: ``value`` (SQL text) where ``feature`` is filled on ``ds``, else null: null for a feature not stored,
    and from its ``deprecated_ds`` on. ``ds``: the day of every row, or :data:`ROW_DS` for each row's own ``ds`` column."""
    empty = f"CAST(NULL AS {feature_type(feature).simpleString()})"
    if ds != ROW_DS:
        return value if feature.populated_on(ds) else empty
    deprecated = feature.lifecycle.deprecated_ds
    if not feature.stored:
        return empty
    return value if deprecated is None else f"CASE WHEN ds < {literal(deprecated.isoformat())} THEN {value} ELSE {empty} END"


def derived_column(feature: Feature, ds: dt.date | str | None = None) -> Column:
    """The value of a derived feature: its expression cast to its type; null from its deprecation on
    (``ds``: see :func:`populated`; None: not checked)."""
    if feature.derived is None:
        raise ValueError(f"feature {feature.name!r} is not derived")
    value = f"CAST(({feature.derived}) AS {feature_type(feature).simpleString()})"
    return F.expr(value if ds is None else populated(feature, value, ds))


def add_derived(frame: DataFrame, registry: DatasetRegistry, ds: dt.date | str | None = None) -> DataFrame:
    """``frame`` with every derived feature of the registry computed, in registry order."""
    for feature in registry.derived_features:
        frame = frame.withColumn(feature.name, derived_column(feature, ds))
    return frame


def validate_derived(spark: SparkSession, registry: DatasetRegistry) -> None:
    """Check every derived expression against the table's key and feature columns (labels are not visible).

    Raises :class:`RegistryError` naming the feature, its expression and Spark's reason.
    """
    if not registry.derived_features:
        return
    visible = StructType([f for f in table_schema(registry).fields if f.name not in registry.label_columns])
    frame = spark.createDataFrame([], visible).drop(*(f.name for f in registry.derived_features))
    for feature in registry.derived_features:
        try:
            frame = frame.withColumn(feature.name, derived_column(feature))
            frame.schema  # noqa: B018 - analysis happens here
        except Exception as err:  # parse and analysis errors come as several pyspark exception types
            raise RegistryError(
                f"{registry.source}: derived expression of feature {feature.name!r} ({feature.derived}) does not "
                f"resolve to {feature_type(feature).simpleString()}: {first_line(err)}. It may use the key columns and the "
                "features defined before it, never labels"
            ) from err
