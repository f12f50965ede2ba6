"""Per-ds feature statistics: one row per feature into ``featurehouse_catalog.feature_stats``.

    stats = compute_partition_stats(spark, registry, "2026-11-01")
    write_partition_stats(spark, stats)      # replaces that ds's rows, in one commit

Every publish computes them from the rows it wrote (:func:`published_stats`, called by
``warehouse/publish.py``: the label join, the stream's publish, ``featurehouse publish``, the
Criteo import), the per-column aggregate inside the quality gate's own pass. ``featurehouse
catalog stats`` (:func:`compute_partition_stats`) recomputes a partition from the table: for a
ds rewritten by other means (a backfill, ``features apply``) or published with ``--no-stats``.
The exact columns (counts, nulls, min, max, means, list lengths) of the two agree exactly; the
quantiles and distinct-id estimates within their error (``percentile_approx``'s rank error of
about values / accuracy, exact up to 5,000 values; HyperLogLog++'s ``DISTINCT_RSD``).

One Delta version is pinned: the version is read once from the log, Spark reads
the partition at that version and the files are listed at that version, so the
row statistics and the bytes on disk describe the same data.

Passes over the partition: one aggregation for every per-column statistic, and,
when there are sparse features, one more over their exploded ids (the projected
columns are persisted in between). Bytes on disk come from the Parquet footers
(``warehouse/footers.py``), not from the data; the files and the columns' physical names
from the pinned snapshot (``schemas/delta_snapshot.py``).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from schemas.catalog import DENSE_QUANTILES, FEATURE_STATS, FEATURE_STATS_SCHEMA, LENGTH_QUANTILES, catalog_table
from schemas.delta_snapshot import Snapshot, open_snapshot, physical_names
from schemas.errors import ConfigError, InvalidNameError, TableError
from schemas.names import format_ds, parse_ds, validate_name
from schemas.progress import Progress, silent
from schemas.registry import PARTITION_COLUMN, DatasetRegistry, Feature, Kind
from warehouse.catalog import ensure_catalog_table
from warehouse.evolution import check_type
from warehouse.footers import bytes_by_column
from warehouse.tables import overwrite_where, persisted, retry_conflicts, table_name

#: ``percentile_approx`` accuracy (Spark's default): rank error about values / accuracy; exact (every
#: value kept) while accuracy >= 2 x the non-null values, i.e. up to 5,000 of them.
DEFAULT_ACCURACY = 10_000
#: Relative standard deviation asked of ``approx_count_distinct`` (HyperLogLog++), Spark's default.
DISTINCT_RSD = 0.05

_COLUMNS = tuple(FEATURE_STATS_SCHEMA.names)


@dataclass(frozen=True)
class PartitionStats:
    """The statistics of one ds of a feature table, at one Delta version."""

    dataset: str
    ds: str
    table: str
    table_version: int
    rows: int
    files: int
    #: One dict per feature, keys and order of ``FEATURE_STATS_SCHEMA``, in registry order.
    features: tuple[dict[str, Any], ...]
    #: Stored registry features that are not columns of the table at that version.
    skipped: tuple[str, ...]
    elapsed_s: float
    #: The catalog table's version holding these rows, once written.
    catalog_version: int | None = None

    def by_feature(self) -> dict[str, dict[str, Any]]:
        return {row["feature"]: row for row in self.features}

    @property
    def bytes_on_disk(self) -> int:
        return sum(row["bytes_on_disk"] for row in self.features)

    def format(self) -> str:
        dense = sum(row["kind"] == Kind.DENSE.value for row in self.features)
        lines = [
            f"stats {self.dataset} ds={self.ds} (table {self.table} version {self.table_version}): "
            f"{self.rows:,} rows in {self.files} files, {len(self.features)} features "
            f"({dense} dense, {len(self.features) - dense} sparse), {_human_bytes(self.bytes_on_disk)} on disk, "
            f"{self.elapsed_s:.1f}s"
        ]
        if self.skipped:
            lines.append(f"  skipped (not in the table yet): {', '.join(self.skipped)}")
        if self.catalog_version is not None:
            lines.append(f"  written to {catalog_table(FEATURE_STATS)} version {self.catalog_version}")
        return "\n".join(lines)


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def _validate_table(table: str) -> str:
    parts = table.split(".")
    if len(parts) != 2:
        raise InvalidNameError(f"table {table!r} is not of the form database.table, e.g. featurehouse.ads")
    for part in parts:
        validate_name("table", part)
    return table


def _table_location(spark: SparkSession, table: str, *, dataset: str, ds: str) -> str:
    if not spark.catalog.tableExists(table):
        raise TableError(
            f"table {table} does not exist; run `featurehouse label-join --dataset {dataset} --ds {ds}` to create it"
        )
    detail = spark.sql(f"DESCRIBE DETAIL {table}").first()
    if detail is None or (detail["format"] or "").lower() != "delta":
        found = None if detail is None else detail["format"]
        raise TableError(f"table {table} is a {found} table, not Delta; feature tables are Delta tables")
    return str(detail["location"])


def stats_aggregates(features: Sequence[Feature], accuracy: int = DEFAULT_ACCURACY) -> dict[str, Column]:
    """Every per-column statistic of ``features``, as aggregate expressions by name (``rows``, ``<stat>_<index>``).

    One global aggregate of them gives a partition's statistics; the quality gate computes them in its own
    pass over the rows it validates (``warehouse/publish.py``), so a published ds pays no second pass.
    """
    dense_qs = [q for _, q in DENSE_QUANTILES]
    length_qs = [q for _, q in LENGTH_QUANTILES]
    exprs = {"rows": F.count(F.lit(1))}
    for i, feature in enumerate(features):
        column = F.col(feature.name)
        exprs[f"non_null_{i}"] = F.count(column)
        if feature.kind is Kind.DENSE:
            value = column.cast("double")
            exprs |= {
                f"min_{i}": F.min(value),
                f"max_{i}": F.max(value),
                f"mean_{i}": F.avg(value),
                f"stddev_{i}": F.stddev_samp(value),
                f"quantiles_{i}": F.percentile_approx(value, dense_qs, accuracy),
            }
        else:
            length = F.when(column.isNotNull(), F.size(column))  # ANSI: size(null) is null, say so explicitly
            exprs |= {
                f"len_mean_{i}": F.avg(length),
                f"len_quantiles_{i}": F.percentile_approx(length, length_qs, accuracy),
            }
    return exprs


def aggregate_stats(frame: DataFrame, features: Sequence[Feature], accuracy: int = DEFAULT_ACCURACY) -> dict[str, Any]:
    """:func:`stats_aggregates` of ``frame``, computed: one Spark job (a global aggregate, one row)."""
    exprs = stats_aggregates(features, accuracy)
    row = frame.agg(*(column.alias(name) for name, column in exprs.items())).collect()[0]
    return row.asDict()


def stored_features(registry: DatasetRegistry, schema: StructType) -> tuple[list[Feature], tuple[str, ...]]:
    """The registry's stored features that are columns of ``schema`` (type-checked), and those that are not."""
    present = set(schema.names)
    features = [f for f in registry.stored_features if f.name in present]
    skipped = tuple(f.name for f in registry.stored_features if f.name not in present)
    actual = {f.name: f.dataType for f in schema.fields}
    for feature in features:
        check_type(feature, feature.name, actual[feature.name], registry)
    return features, skipped


_PAIR = "array<struct<f:int,id:bigint>>"


def _tagged_ids(column: Column, index: int, kind: Kind) -> Column:
    """The list's ids as ``(f=index, id)`` structs; an empty array for a null list."""
    tagged = F.transform(
        column, lambda x: F.struct(F.lit(index).alias("f"), (x if kind is Kind.SPARSE else x["id"]).alias("id"))
    )
    return F.coalesce(tagged, F.array().cast(_PAIR))


def _distinct_ids(frame: DataFrame, features: Sequence[Feature]) -> dict[int, int]:
    """Approximate distinct ids of every sparse feature, by feature index, in one pass."""
    tagged = [_tagged_ids(F.col(f.name), i, f.kind) for i, f in enumerate(features) if f.kind is not Kind.DENSE]
    if not tagged:
        return {}
    pairs = frame.select(F.explode(F.concat(*tagged)).alias("p")).select("p.f", "p.id")
    counts = pairs.groupBy("f").agg(F.approx_count_distinct("id", DISTINCT_RSD).alias("n")).collect()
    return {int(row["f"]): int(row["n"]) for row in counts}


def _feature_row(
    base: dict[str, Any], feature: Feature, *, index: int, agg: Mapping[str, Any], distinct: dict[int, int], bytes_on_disk: int
) -> dict[str, Any]:
    """One row of ``feature_stats``: ``base`` (the partition's columns) and the feature's statistics."""
    non_null = int(agg[f"non_null_{index}"])
    row = dict.fromkeys(_COLUMNS)
    row.update(base)
    row.update(
        feature=feature.name,
        kind=feature.kind.value,
        non_null=non_null,
        coverage=non_null / base["rows"],
        bytes_on_disk=bytes_on_disk,
    )
    if feature.kind is Kind.DENSE:
        row.update({stat: _float(agg[f"{stat}_{index}"]) for stat in ("min", "max", "mean", "stddev")})
        quantiles = agg[f"quantiles_{index}"] or [None] * len(DENSE_QUANTILES)
        row.update({name: _float(v) for (name, _), v in zip(DENSE_QUANTILES, quantiles, strict=True)})
    else:
        row["len_mean"] = _float(agg[f"len_mean_{index}"])
        quantiles = agg[f"len_quantiles_{index}"] or [None] * len(LENGTH_QUANTILES)
        row.update({name: _float(v) for (name, _), v in zip(LENGTH_QUANTILES, quantiles, strict=True)})
        row["approx_distinct_ids"] = distinct.get(index, 0) if non_null else None
    return row


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def compute_partition_stats(
    spark: SparkSession,
    registry: DatasetRegistry,
    ds: str,
    *,
    table: str | None = None,
    version: int | None = None,
    accuracy: int = DEFAULT_ACCURACY,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
) -> PartitionStats:
    """Statistics of partition ``ds`` of the dataset's feature table, one row per stored feature.

    ``table`` defaults to ``featurehouse.<dataset>``; ``version`` to the table's
    current version (read once); ``accuracy`` is ``percentile_approx``'s; ``now``
    (timezone-aware) stamps ``computed_at``. Registry features the table lacks are
    skipped and listed in the result. An empty or missing ds is a :class:`TableError`.
    """
    started = time.monotonic()
    say = progress or silent
    day = parse_ds(ds)
    ds = format_ds(day)
    table = _validate_table(table or table_name(registry.dataset))
    if accuracy < 1:
        raise ConfigError(f"accuracy {accuracy} is not allowed; use a positive integer, e.g. {DEFAULT_ACCURACY}")

    snapshot = open_snapshot(_table_location(spark, table, dataset=registry.dataset, ds=ds), [day], version=version)
    pinned = snapshot.version
    empty = (
        f"ds {ds} has no rows in table {table} at version {pinned}; run `featurehouse label-join "
        f"--dataset {registry.dataset} --ds {ds}` first"
    )
    say(f"stats {registry.dataset} ds={ds}: table {table} version {pinned}, {len(snapshot.files)} files")
    if not snapshot.files:
        raise TableError(empty)

    frame = spark.read.option("versionAsOf", pinned).table(table)
    features, skipped = stored_features(registry, frame.schema)
    projected = frame.where(F.col(PARTITION_COLUMN) == F.lit(ds)).select(*(f.name for f in features))
    sparse = any(f.kind is not Kind.DENSE for f in features)
    # read twice when a feature is sparse: by the aggregate, then by the count of its distinct ids
    with persisted(projected, StorageLevel.MEMORY_AND_DISK) if sparse else nullcontext(projected) as data:
        say(f"aggregating {len(features)} columns")
        agg = aggregate_stats(data, features, accuracy)
        if agg["rows"] == 0:
            raise TableError(empty)
        if sparse:
            say("counting distinct ids of the sparse features")
        distinct = _distinct_ids(data, features)
    say(f"reading the Parquet footers of {len(snapshot.files)} files")
    return _partition_stats(registry, ds, table, snapshot, features, skipped, agg, distinct,
                            now=now, started=started)  # fmt: skip


def published_stats(
    spark: SparkSession,
    registry: DatasetRegistry,
    rows: DataFrame,
    *,
    table: str,
    day: dt.date,
    version: int,
    agg: Mapping[str, Any] | None = None,
    accuracy: int = DEFAULT_ACCURACY,
    now: dt.datetime | None = None,
) -> PartitionStats:
    """The statistics of ``rows``, just published as ds ``day`` of ``table`` in commit ``version``.

    ``rows`` are the rows that commit wrote (the caller's persisted frame), so no table is read:
    ``agg`` is :func:`stats_aggregates` of them when already computed (by the quality gate's pass),
    else one aggregate computes it here; the sparse features' distinct ids take one more pass over
    ``rows``; bytes on disk come from the footers of the files of ``day`` at ``version``. The result
    is :func:`compute_partition_stats` of that ds at that version (``catalog stats``): the same
    expressions over the same rows, the approximate ones within their error (see the module).
    """
    started = time.monotonic()
    ds = format_ds(day)
    features, skipped = stored_features(registry, rows.schema)
    if agg is None:
        agg = aggregate_stats(rows, features, accuracy)
    distinct = _distinct_ids(rows, features)
    snapshot = open_snapshot(_table_location(spark, table, dataset=registry.dataset, ds=ds), [day], version=version)
    return _partition_stats(registry, ds, table, snapshot, features, skipped, agg, distinct,
                            now=now, started=started)  # fmt: skip


def _partition_stats(registry: DatasetRegistry, ds: str, table: str, snapshot: Snapshot, features: Sequence[Feature],
                     skipped: tuple[str, ...], agg: Mapping[str, Any], distinct: dict[int, int], *,
                     now: dt.datetime | None, started: float) -> PartitionStats:  # fmt: skip
    """One :class:`PartitionStats` from the aggregate, the distinct ids and the pinned snapshot's footers."""
    files = [f.uri for f in snapshot.files]
    sizes = bytes_by_column(files, physical_names(snapshot, [f.name for f in features]))
    base = {
        "dataset": registry.dataset,
        "table_version": snapshot.version,
        "rows": int(agg["rows"]),
        "computed_at": now or dt.datetime.now(dt.UTC),
        "ds": ds,
    }
    rows = tuple(  # an empty partition (a forced publish of no rows) has no statistics: its rows are removed
        _feature_row(base, f, index=i, agg=agg, distinct=distinct, bytes_on_disk=sizes[f.name])
        for i, f in enumerate(features) if base["rows"]
    )
    return PartitionStats(
        dataset=registry.dataset,
        ds=ds,
        table=table,
        table_version=snapshot.version,
        rows=base["rows"],
        files=len(files),
        features=rows,
        skipped=skipped,
        elapsed_s=time.monotonic() - started,
    )


def write_partition_stats(spark: SparkSession, stats: PartitionStats) -> int:
    """Replace the catalog's rows of ``(stats.dataset, stats.ds)`` with ``stats`` in one commit.

    Rerunning replaces, never duplicates. Returns the catalog table's version after the write.
    """
    table = ensure_catalog_table(spark, FEATURE_STATS)
    schema = from_arrow_schema(FEATURE_STATS_SCHEMA, prefer_timestamp_ntz=False)
    frame = spark.createDataFrame([tuple(row[c] for c in _COLUMNS) for row in stats.features], schema=schema)
    condition = (F.col("dataset") == F.lit(stats.dataset)) & (F.col("ds") == F.lit(stats.ds))
    # concurrent writers of other ds (joins of other days) touch other partitions; one of the same ds conflicts,
    # and the replace repeated after it leaves one copy of one writer's rows
    return retry_conflicts(lambda: overwrite_where(spark, table, frame, condition), attempts=4).version


def refresh_partition_stats(
    spark: SparkSession,
    registry: DatasetRegistry,
    ds: str,
    *,
    table: str | None = None,
    now: dt.datetime | None = None,
    progress: Progress | None = None,
) -> PartitionStats:
    """Compute the statistics of ``ds`` and write them to the catalog; ``elapsed_s`` covers both."""
    started = time.monotonic()
    stats = compute_partition_stats(spark, registry, ds, table=table, now=now, progress=progress)
    version = write_partition_stats(spark, stats)
    return replace(stats, catalog_version=version, elapsed_s=time.monotonic() - started)
