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

from schemas.errors import RegistryError, first_line
from schemas.registry import DatasetRegistry, Feature
from schemas.spark import feature_type, table_schema


def derived_column(feature: Feature, ds: dt.date | None = None) -> Column:
    """The value of a derived feature: its expression cast to its type; null from its deprecation on."""
    if feature.derived is None:
        raise ValueError(f"feature {feature.name!r} is not derived")
    if ds is not None and not feature.populated_on(ds):
        return F.lit(None).cast(feature_type(feature))
    return F.expr(feature.derived).cast(feature_type(feature))


def add_derived(frame: DataFrame, registry: DatasetRegistry, ds: dt.date | None = None) -> DataFrame:
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
