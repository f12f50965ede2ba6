"""Parsed impression records as flat rows: one top-level column per feature, and what the summaries count."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from etl.records.landing import RAW_COLUMN, ROW_ID_COLUMN
from etl.records.quarantine import VALID_COLUMN, impression_valid
from schemas.registry import DatasetRegistry
from schemas.spark import CORRUPT_RECORD_COLUMN, FEATURE_MAPS, feature_type
from schemas.sql_text import identifier
from warehouse.derived import ROW_DS, add_derived, populated


def flatten_features(registry: DatasetRegistry, ds: dt.date | str) -> list[Column]:
    """One top-level column per logged feature, taken from its field of the parsed record and cast to its type.

    The record was parsed with :func:`schemas.spark.impression_record_schema`, so each feature is
    already a field of its map's struct. A renamed feature is taken under its new name, then its
    old one. A feature deprecated by ``ds`` is null (``ds``: a day, or ``ROW_DS``, each row's own ds).
    """
    columns = []
    for f in registry.logged_features:
        logged = [f"{identifier(FEATURE_MAPS[f.kind])}.{identifier(key)}" for key in f.log_keys]
        taken = logged[0] if len(logged) == 1 else "coalesce(" + ", ".join(logged) + ")"
        value = f"CAST({taken} AS {feature_type(f).simpleString()})"
        columns.append(F.expr(f"{populated(f, value, ds)} AS {identifier(f.name)}"))  # one Py4J call (schemas/sql_text.py)
    return columns


def feature_maps_json() -> Column:
    """The line's three feature maps as JSON text (``_dense_json``, ...), cut out of the line in one pass.

    :func:`unknown_feature_keys` lists their names with ``json_object_keys``, which skips the values:
    the values themselves are parsed once, by the record schema.
    """
    return F.json_tuple(RAW_COLUMN, *FEATURE_MAPS.values()).alias(*(f"_{m}_json" for m in FEATURE_MAPS.values()))


def unknown_feature_keys(registry: DatasetRegistry) -> Column:
    """Per record, the logged feature names the registry does not know (for that map), whatever their status."""
    parts = []
    none = F.array().cast("array<string>")
    for kind, column in FEATURE_MAPS.items():
        names = registry.known_log_keys(kind)
        known = F.array(*[F.lit(n) for n in names]) if names else none
        parts.append(F.array_except(F.coalesce(F.json_object_keys(F.col(f"_{column}_json")), none), known))
    return F.concat(*parts)


def flatten_impressions(records: DataFrame, registry: DatasetRegistry, ds: dt.date | None) -> DataFrame:
    """Parsed impression records as flat rows: keys, features (derived ones computed), and what the summary counts.

    ``records``: :func:`etl.records.landing.read_impressions` with :func:`schemas.spark.impression_record_schema`.
    ``_valid``: whether the record is usable (:func:`etl.records.quarantine.impression_valid`); ``_raw``
    (the line), ``source_file``, ``split_start`` and ``_row_id`` say where it came from (``_raw`` is
    kept for bad records only). ``_unknown``: logged feature names not in the registry. ``ds``: the day of
    every record (a batch job), or None: each record's own ``ds`` column (a stream, whose records span days).
    """
    day = ROW_DS if ds is None else ds
    flat = records.select("*", feature_maps_json()).select(
        "impression_id",
        "user_id",
        "item_id",
        "event_time",
        *flatten_features(registry, day),
        unknown_feature_keys(registry).alias("_unknown"),
        CORRUPT_RECORD_COLUMN,
        RAW_COLUMN,
        "source_file",
        "split_start",
        ROW_ID_COLUMN,
        *(["line"] if "line" in records.columns else []),  # a stream's records are numbered as they are read
        "ds",
    )
    flat = flat.withColumn(VALID_COLUMN, impression_valid(registry, ds))
    flat = flat.withColumn(RAW_COLUMN, F.when(~F.col(VALID_COLUMN), F.col(RAW_COLUMN)))
    return add_derived(flat, registry, day)
