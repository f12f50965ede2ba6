"""Labels attributed to their impressions inside each label type's window, and the feature table's rows."""

from __future__ import annotations

import datetime as dt
import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from schemas.names import format_ds
from schemas.registry import DatasetRegistry


def window_days(registry: DatasetRegistry) -> int:
    """How many days after an impression's ds its labels' longest window reaches (a 3-day window: 3)."""
    return math.ceil(registry.max_window / dt.timedelta(days=1))


def window_micros(registry: DatasetRegistry) -> Column:
    """The attribution window of each row's ``label_type``, in microseconds (null for unknown types)."""
    expr = None
    for label in registry.labels:
        micros = F.lit(label.window // dt.timedelta(microseconds=1))
        expr = F.when(F.col("label_type") == label.name, micros) if expr is None else expr.when(
            F.col("label_type") == label.name, micros
        )
    return expr


def attribute_labels(impressions: DataFrame, labels: DataFrame, registry: DatasetRegistry) -> DataFrame:
    """Labels joined to their impressions, with their delay and whether they fall in the window.

    ``impressions``: impression_id, event_time (deduplicated).
    ``labels``: impression_id, label_type (known types only), event_time.
    """
    delay = F.unix_micros(F.col("l.event_time")) - F.unix_micros(F.col("i.event_time"))
    return (
        impressions.select("impression_id", "event_time").alias("i")
        .join(labels.alias("l"), F.col("i.impression_id") == F.col("l.impression_id"))
        .select(
            F.col("i.impression_id").alias("impression_id"),
            F.col("l.label_type").alias("label_type"),
            delay.alias("delay_us"),
        )
        .withColumn("in_window", (F.col("delay_us") >= 0) & (F.col("delay_us") <= window_micros(registry)))
    )


#: The per-impression label counts :func:`feature_rows` adds on request: label records matched, label types
#: among them, and per label type the records outside its window. Summed over the rows they are the run's label
#: counts, so no second join is needed to count them.
MATCHED_COLUMN = "_labels_matched"
TYPES_COLUMN = "_label_types"
OUTSIDE_PREFIX = "_outside_window_"


def label_count_columns(registry: DatasetRegistry) -> list[str]:
    return [MATCHED_COLUMN, TYPES_COLUMN, *(OUTSIDE_PREFIX + label.name for label in registry.labels)]


def label_columns(attributed: DataFrame, registry: DatasetRegistry, *, counts: bool = False) -> DataFrame:
    """One row per impression with a matched label: one 0/1 column per label type (and, with ``counts``, the
    :func:`label_count_columns`)."""
    of_type = {label.name: F.col("label_type") == label.name for label in registry.labels}
    extra = [
        F.count(F.lit(1)).alias(MATCHED_COLUMN),
        sum((F.max(is_type.cast("int")) for is_type in of_type.values()), F.lit(0)).alias(TYPES_COLUMN),
        *[F.count_if(is_type & ~F.col("in_window")).alias(OUTSIDE_PREFIX + name) for name, is_type in of_type.items()],
    ] if counts else []  # fmt: skip
    return attributed.groupBy("impression_id").agg(
        *[
            F.max(F.when(of_type[label.name] & F.col("in_window"), 1).otherwise(0)).alias(label.column)
            for label in registry.labels
        ],
        *extra,
    )


def feature_rows(impressions: DataFrame, attributed: DataFrame, registry: DatasetRegistry, ds: dt.date, *,
                 label_counts: bool = False) -> DataFrame:  # fmt: skip
    """The rows of the feature table for ``ds``: keys, labels (0/1), features, ds.

    ``impressions``: valid, deduplicated rows of :func:`flatten_impressions`; ``attributed``: their
    labels, from :func:`attribute_labels`. ``label_counts``: the rows also carry the
    :func:`label_count_columns` (drop them before writing).
    """
    counted = label_count_columns(registry) if label_counts else []
    positives = label_columns(attributed, registry, counts=label_counts)
    joined = impressions.join(positives, "impression_id", "left").fillna(0, subset=[*registry.label_columns, *counted])
    return joined.select(
        "impression_id",
        "user_id",
        "item_id",
        "event_time",
        *[F.col(c).cast("int").alias(c) for c in registry.label_columns],
        *[f.name for f in registry.stored_features],
        F.lit(format_ds(ds)).alias("ds"),
        *counted,
    )
