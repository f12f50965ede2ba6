"""Bad input records: what is wrong with each, and the quarantine table that keeps them.

Nothing a logger wrote is lost: a record the label join cannot use lands in
``featurehouse_quarantine.<dataset>`` (partitioned by ds) with where it came from and why::

    stream        impressions | labels | criteo (a line of `featurehouse import criteo`)
    source_file   the landing (or imported) file
    split_start   byte offset of Spark's split of the file (0 unless the file was larger than
                  spark.sql.files.maxPartitionBytes, 128 MB by default, and was split; always 0
                  for criteo, whose lines are numbered across splits)
    line          1-based line number counted from split_start (null for an empty file)
    raw           the line as it was
    problem       empty_line, not_json, missing_field, bad_type, bad_timestamp, outside_ds,
                  not_finite, unknown_label_type, empty_file; criteo: field_count, bad_label,
                  not_integer, not_hex (etl/criteo/importer.py)
    reason        e.g. "dense feature 'user_ctr_7d': 'abc' is not a number"
    run_id        the label join (or import) that found it

Reasons are found per record with Spark SQL under ANSI mode: values are tested with
``try_cast`` and ``from_json`` (which return null instead of failing the job), so one
bad value never stops the day and no check is turned off to let it through.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from etl.records.landing import RAW_COLUMN, line_numbers
from schemas.names import format_ds, validate_name
from schemas.registry import DatasetRegistry, DType, Feature, Kind
from schemas.spark import CORRUPT_RECORD_COLUMN
from schemas.sql_text import identifier, literal
from warehouse.tables import create_delta_sql, create_if_missing, replace_partition

DATABASE = "featurehouse_quarantine"
FLOAT32_MAX = 3.4028234663852886e38
PROBLEM_COLUMN = "_problem"
VALID_COLUMN = "_valid"

SCHEMA = T.StructType(
    [
        T.StructField("stream", T.StringType(), False),
        T.StructField("source_file", T.StringType(), True),
        T.StructField("split_start", T.LongType(), True),
        T.StructField("line", T.LongType(), True),
        T.StructField("raw", T.StringType(), True),
        T.StructField("problem", T.StringType(), False),
        T.StructField("reason", T.StringType(), False),
        T.StructField("run_id", T.StringType(), False),
        T.StructField("quarantined_at", T.TimestampType(), False),
        T.StructField("ds", T.StringType(), False),
    ]
)

_IMPRESSION_FIELDS = (
    "impression_id string, user_id string, item_id string, event_time string, "
    "dense map<string,string>, sparse map<string,string>, weighted_sparse map<string,string>"
)
_LABEL_FIELDS = "impression_id string, label_type string, event_time string"


def quarantine_table(dataset: str) -> str:
    return f"{DATABASE}.{validate_name('dataset', dataset)}"


def quoted(column: Column, limit: int = 80) -> Column:
    """A value for a message: quoted, cut to ``limit`` characters."""
    text = column.cast("string")
    return F.concat(F.lit("'"), F.when(F.length(text) > limit, F.concat(F.substring(text, 1, limit), F.lit("..."))
                                      ).otherwise(text), F.lit("'"))  # fmt: skip


Rule = tuple[Column, str, "Column | str"]  # (condition, problem code, reason)


def _first_bad_entry(entries: Column, bad: Callable[[Column, Column], Column], what: str, problem: str, code: str
                     ) -> Rule:  # fmt: skip
    """A rule: the map has a non-null value that is ``bad(value, key)``; reason "<what> '<key>': '<value>' <problem>"."""
    found = F.filter(F.map_entries(entries), lambda e: e["value"].isNotNull() & bad(e["value"], e["key"]))
    first = F.get(found, 0)
    message = F.concat(F.lit(f"{what} "), quoted(first["key"]), F.lit(": "), quoted(first["value"]), F.lit(f" {problem}"))
    return F.coalesce(F.size(found), F.lit(0)) > 0, code, message


def first_problem(rules: Sequence[Rule], fallback: str) -> Column:
    """``struct(code, reason)`` of the first rule that holds (``fallback`` if none does)."""
    chain = None
    for condition, code, reason in [*rules, (F.lit(True), "unusable", fallback)]:
        value = F.struct(F.lit(code).alias("code"), (F.lit(reason) if isinstance(reason, str) else reason).alias("reason"))
        chain = F.when(condition, value) if chain is None else chain.when(condition, value)
    return chain


def _common_rules(raw: Column, loose: Column, required: Sequence[str]) -> list[Rule]:
    rules: list[Rule] = [
        (F.trim(raw) == "", "empty_line", "empty line"),
        (F.from_json(raw, "map<string,string>").isNull(), "not_json",
         "not a JSON object (malformed or truncated line)"),
    ]  # fmt: skip
    rules += [(loose[name].isNull(), "missing_field", f"missing required field {name}") for name in required]
    rules.append((loose["event_time"].try_cast("timestamp").isNull(), "bad_timestamp",
                  F.concat(F.lit("event_time "), quoted(loose["event_time"]), F.lit(" is not a timestamp"))))  # fmt: skip
    return rules


def _required(names: Sequence[str]) -> Column:
    valid = F.col(CORRUPT_RECORD_COLUMN).isNull()
    for name in names:
        valid = valid & F.col(name).isNotNull()
    return valid


def _with_problem(bad: DataFrame, loose_fields: str, rules: Callable[[Column], list[Rule]], fallback: str) -> DataFrame:
    """``bad`` (records known unusable) with ``_problem``; each raw line is parsed again, loosely, once.

    Only bad records get here: finding a reason takes a large expression (a rule per dense
    feature) that Spark compiles per query, so a day without bad records never builds it.
    """
    with_loose = bad.withColumn("_loose", F.from_json(F.col(RAW_COLUMN), loose_fields))
    return with_loose.withColumn(PROBLEM_COLUMN, first_problem(rules(F.col("_loose")), fallback)).drop("_loose")


def _finite(column: Column) -> Column:
    return ~F.isnan(column) & (F.abs(column) != float("inf"))


def ds_value(ds: dt.date | None) -> Column:
    """The ds a record belongs to: ``ds`` for a job of one ds, else the record's own ``ds`` column (a stream)."""
    return F.col("ds") if ds is None else F.lit(format_ds(ds))


def _in_ds_sql(ds: dt.date | None) -> str:
    """SQL text: whether the record's ``event_time`` is in ``ds`` (None: in its own ``ds`` column)."""
    return f"to_date(event_time) = CAST({'ds' if ds is None else literal(format_ds(ds))} AS DATE)"


def _in_ds(ds: dt.date | None) -> Column:
    return F.expr(_in_ds_sql(ds))


def impression_valid(registry: DatasetRegistry, ds: dt.date | None) -> Column:
    """Whether an impression record of ``ds`` (None: of its own ``ds`` column) is usable.

    It parsed, has an ``impression_id`` and an ``event_time`` within ``ds``, and every dense
    feature is finite in its dtype. Evaluated on the columns
    :func:`etl.records.flatten.flatten_impressions` builds (the typed record and the flattened features).
    One SQL expression (``schemas/sql_text.py``): as Columns it was some 5,000 Py4J calls for the demo's registry.
    """
    terms = [f"{identifier(CORRUPT_RECORD_COLUMN)} IS NULL", "impression_id IS NOT NULL", "event_time IS NOT NULL",
             _in_ds_sql(ds)]  # fmt: skip
    for feature in registry.logged_features:
        if feature.kind is Kind.DENSE:
            name = identifier(feature.name)
            terms.append(f"coalesce(NOT isnan({name}) AND abs({name}) != {literal(math.inf)}, TRUE)")
    return F.expr(f"coalesce({' AND '.join(terms)}, FALSE)")


def with_impression_problem(bad: DataFrame, registry: DatasetRegistry, ds: dt.date | None) -> DataFrame:
    """``bad`` (unusable impression records of ``ds``, None: of their ``ds`` column) with ``_problem``: why,
    as ``struct(code, reason)``.

    The reason of a record that did not parse is found by parsing its raw line again, loosely.
    """
    dense = [f for f in registry.logged_features if f.kind is Kind.DENSE]
    return _with_problem(bad, _IMPRESSION_FIELDS, lambda loose: _impression_rules(loose, dense, _in_ds(ds), ds),
                         "not a usable impression record")  # fmt: skip


def _impression_rules(loose: Column, dense: Sequence[Feature], in_ds: Column, ds: dt.date | None) -> list[Rule]:
    rules = _common_rules(F.col(RAW_COLUMN), loose, ["impression_id", "event_time"])
    for key in ("user_id", "item_id"):
        rules.append((loose[key].isNotNull() & loose[key].try_cast("bigint").isNull(), "bad_type",
                      F.concat(F.lit(f"{key} "), quoted(loose[key]), F.lit(" is not an integer"))))  # fmt: skip
    rules.append(_first_bad_entry(loose["dense"], lambda v, _key: v.try_cast("double").isNull(),
                                  "dense feature", "is not a number", "bad_type"))  # fmt: skip
    rules.append(_first_bad_entry(
        loose["sparse"], lambda v, _key: F.coalesce(F.exists(F.from_json(v, "array<bigint>"), lambda x: x.isNull()), F.lit(True)),
        "sparse feature", "is not a list of integer ids", "bad_type",
    ))  # fmt: skip
    weighted = "array<struct<id:bigint,weight:double>>"
    rules.append(_first_bad_entry(
        loose["weighted_sparse"],
        lambda v, _key: F.coalesce(F.exists(F.from_json(v, weighted), lambda x: x["id"].isNull() | x["weight"].isNull()),
                             F.lit(True)),
        "weighted sparse feature", "is not a list of {id, weight}", "bad_type",
    ))  # fmt: skip
    rules.append((F.col(CORRUPT_RECORD_COLUMN).isNotNull(), "bad_type", "does not match the impression format"))
    rules.append((~in_ds, "outside_ds",
                  F.concat(F.lit("event_time "), F.col("event_time").cast("string"), F.lit(" is not in ds "), ds_value(ds))))  # fmt: skip
    # One rule over the logged map, not one per feature: the expression stays small to compile.
    float32_keys = F.array(*[F.lit(k) for f in dense if f.dtype is DType.FLOAT32 for k in f.log_keys])
    dense_keys = F.array(*[F.lit(k) for f in dense for k in f.log_keys])
    rules.append(_first_bad_entry(
        loose["dense"],
        lambda v, k: F.array_contains(dense_keys, k) & ~F.coalesce(
            _finite(v.try_cast("double"))
            & ((F.abs(v.try_cast("double")) <= FLOAT32_MAX) | ~F.array_contains(float32_keys, k)), F.lit(True)),
        "dense feature", "is not a finite number of its dtype", "not_finite",
    ))  # fmt: skip
    return rules


def label_valid(known_types: Sequence[str]) -> Column:
    """Whether a label record is usable: it parsed, has all three fields, and a label type the registry knows."""
    valid = _required(["impression_id", "label_type", "event_time"]) & F.col("label_type").isin(list(known_types))
    return F.coalesce(valid, F.lit(False))


def with_label_problem(bad: DataFrame, known_types: Sequence[str]) -> DataFrame:
    """``bad`` (unusable label records) with ``_problem``: why, as ``struct(code, reason)``."""

    def rules(loose: Column) -> list[Rule]:
        return [
            *_common_rules(F.col(RAW_COLUMN), loose, ["impression_id", "label_type", "event_time"]),
            (F.col(CORRUPT_RECORD_COLUMN).isNotNull(), "bad_type", "does not match the label format"),
            (~F.col("label_type").isin(list(known_types)), "unknown_label_type",
             F.concat(F.lit("label_type "), quoted(F.col("label_type")), F.lit(f" is not one of {', '.join(known_types)}"))),
        ]  # fmt: skip

    return _with_problem(bad, _LABEL_FIELDS, rules, "not a usable label record")


def quarantine_rows(bad: DataFrame, every_row: DataFrame, stream: str, run_id: str, now: dt.datetime) -> DataFrame:
    """The quarantine rows of ``bad`` (rows of ``every_row``, with a ``_problem``), with line numbers."""
    return numbered_quarantine_rows(line_numbers(bad, every_row), stream, run_id, now)


def numbered_quarantine_rows(bad: DataFrame, stream: str, run_id: str, now: dt.datetime) -> DataFrame:
    """The quarantine rows of ``bad``: rows with ``source_file``, ``split_start``, ``line``, ``_raw``,
    ``_problem`` and ``ds``."""
    return bad.select(
        F.lit(stream).alias("stream"),
        "source_file",
        "split_start",
        "line",
        F.col(RAW_COLUMN).alias("raw"),
        F.col(PROBLEM_COLUMN)["code"].alias("problem"),
        F.col(PROBLEM_COLUMN)["reason"].alias("reason"),
        F.lit(run_id).alias("run_id"),
        F.lit(now).cast("timestamp").alias("quarantined_at"),
        "ds",
    )


def empty_file_rows(spark: SparkSession, files: Sequence[str], stream: str, ds: dt.date, run_id: str, now: dt.datetime
                    ) -> DataFrame:  # fmt: skip
    """One quarantine row per empty file (a logger that wrote nothing), so that it is seen."""
    rows = [(stream, f, 0, None, "", "empty_file", "empty file", run_id, now, format_ds(ds)) for f in files]
    return spark.createDataFrame(rows, SCHEMA)


def write_quarantine(spark: SparkSession, dataset: str, day: dt.date, rows: DataFrame, *, empty: bool) -> str:
    """Replace ds ``day``'s rows of the dataset's quarantine table with ``rows`` in one commit; return the table.

    ``empty``: ``rows`` has none, so nothing is written unless an earlier run left rows of ``day``
    (a clean day neither creates the table nor commits to it).
    """
    table = quarantine_table(dataset)
    if empty and (not spark.catalog.tableExists(table) or spark.table(table).where(F.col("ds") == format_ds(day)).isEmpty()):
        return table  # nothing to keep, nothing to clear (the table is created by the first bad record)
    create_if_missing(spark, table, lambda: spark.sql(create_delta_sql(table, SCHEMA, partitioned_by=["ds"])))
    replace_partition(spark, table, rows, day)
    return table
