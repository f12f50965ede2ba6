"""Backfill derived features into past partitions, one partition per Delta commit.

    featurehouse backfill --dataset ads --feature item_ctr_7d_log --from 2026-11-01 --to 2026-11-05
    featurehouse backfill --dataset ads --feature item_ctr_7d_log --feature user_topic_x_item_topic --from ... --to ...
    spark-submit etl/maintenance/backfill.py --dataset ads --feature item_ctr_7d_log --from ... --to ...

Several features (``--feature`` repeated) are filled together: each partition is rewritten,
verified and given its statistics once for all of them.

For each ds of the range that the table has, in order:

* rows whose values already equal the expressions' are counted; if all do, the
  partition is skipped (a second run changes nothing and commits nothing);
* otherwise the partition is rewritten with the features recomputed (Delta's
  replaceWhere on that ds: one commit, nothing half-published);
* the commit is then verified against the version before it: the same row count,
  every other column identical (an order-free fingerprint of their values), and
  every row holding the expressions' values. A failed check stops the job and names
  the versions to ``RESTORE`` from;
* a rewritten partition's catalog statistics (``featurehouse_catalog.feature_stats``) are then
  recomputed at that commit, so they describe the backfilled features too.

Partitions are read and rewritten whole; run it when no label join writes the same ds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import reduce

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from schemas.config import DatasetJobConfig
from schemas.errors import ConfigError, RegistryError, TableError
from schemas.names import format_ds, parse_ds, validate_name
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import DatasetRegistry, Feature, load_dataset
from warehouse.command import run_spark_job
from warehouse.derived import derived_column, validate_derived
from warehouse.evolution import prepare_for_write
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.stats import refresh_partition_stats
from warehouse.tables import current_version, replace_partition, table_name


@dataclass(frozen=True, kw_only=True)
class BackfillConfig(DatasetJobConfig):
    features: tuple[str, ...]  # filled together: one rewrite of each partition
    start: dt.date
    end: dt.date

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.features:
            raise ConfigError("no feature to backfill; name one or more derived features with --feature")
        for name in self.features:
            validate_name("feature", name)
        if len(set(self.features)) != len(self.features):
            raise ConfigError(f"--feature names a feature twice ({', '.join(self.features)}); name each once")
        if self.end < self.start:
            raise ConfigError(f"--to {self.end} is before --from {self.start}; give the range in order")


@dataclass(frozen=True)
class PartitionBackfill:
    ds: str
    rows: int
    changed: int
    version: int | None  # the commit written; None when the partition already held the values
    seconds: float
    stats_version: int | None = None  # the feature_stats version holding the rewritten partition's statistics

    def format(self) -> str:
        if self.version is None:
            return f"ds={self.ds}: {self.rows:,} rows already filled, nothing written ({self.seconds:.1f}s)"
        return (f"ds={self.ds}: {self.changed:,} of {self.rows:,} rows filled, Delta version {self.version}, "
                f"other columns verified identical, statistics recomputed ({self.seconds:.1f}s)")  # fmt: skip


@dataclass(frozen=True)
class BackfillSummary:
    dataset: str
    expressions: tuple[tuple[str, str], ...]  # (feature, its derived expression), in the order given
    table: str
    days: tuple[str, ...]
    partitions: tuple[PartitionBackfill, ...]
    elapsed_s: float

    def format(self) -> str:
        present = {p.ds for p in self.partitions}
        absent = [d for d in self.days if d not in present]
        written = [p for p in self.partitions if p.version is not None]
        lines = [
            *(f"backfill {self.table}.{name} = {expression}" for name, expression in self.expressions),
            f"  ds {self.days[0]} .. {self.days[-1]}",
            *(f"  {p.format()}" for p in self.partitions),
            f"  {len(written)} partitions written, {len(self.partitions) - len(written)} already filled, "
            f"{len(absent)} not in the table" + (f" ({', '.join(absent)})" if absent else ""),
            f"  elapsed {self.elapsed_s:.1f}s",
        ]
        return "\n".join(lines)


def _derived_feature(registry: DatasetRegistry, name: str) -> Feature:
    feature = registry.by_name.get(name)
    if feature is None:
        raise RegistryError(f"{registry.source}: no feature {name!r}; add it (with a derived: expression) first")
    if feature.derived is None:
        raise RegistryError(
            f"{registry.source}: feature {name!r} is not derived (it comes from the logs); backfill fills derived "
            "features only: give it a derived: expression, or re-run the label join of the past days"
        )
    if not feature.stored:
        raise RegistryError(f"{registry.source}: feature {name!r} is dropped; there is no column to fill")
    return feature


def _fingerprint(frame: DataFrame, columns: Sequence[str], check: Column) -> Row:
    """Row count, an order-free fingerprint of ``columns``, and rows where ``check`` fails."""
    return frame.agg(
        F.count(F.lit(1)).alias("rows"),
        F.coalesce(F.sum(F.xxhash64(*columns).cast("decimal(38,0)")), F.lit(0)).alias("fingerprint"),
        F.count_if(~check).alias("mismatched"),
    ).first()


def backfill_partition(spark: SparkSession, table: str, features: Sequence[Feature], day: dt.date) -> PartitionBackfill:
    """Fill ``features`` into partition ``day`` of ``table``, in one commit (see the module docstring)."""
    started = time.monotonic()
    ds = format_ds(day)
    values = {feature.name: derived_column(feature, day) for feature in features}
    version = current_version(spark, table)

    def at(v: int) -> DataFrame:
        return spark.read.option("versionAsOf", v).table(table).where(F.col("ds") == ds)

    before = at(version)
    others = [c for c in before.columns if c not in values]
    same = reduce(operator.and_, [F.col(name).eqNullSafe(value) for name, value in values.items()])
    old = _fingerprint(before, others, same)
    if old["mismatched"] == 0:
        return PartitionBackfill(ds, int(old["rows"]), 0, None, time.monotonic() - started)
    commit = replace_partition(spark, table, before.withColumns(values), day)
    new = _fingerprint(at(commit.version), others, same)
    problems = []
    if new["rows"] != old["rows"]:
        problems.append(f"{new['rows']:,} rows instead of {old['rows']:,}")
    if new["fingerprint"] != old["fingerprint"]:
        problems.append("other columns changed")
    if new["mismatched"]:
        problems.append(f"{new['mismatched']:,} rows differ from the expressions")
    if problems:
        raise TableError(
            f"backfill of {', '.join(values)} into {table} ds={ds} wrote version {commit.version} but its check failed: "
            f"{'; '.join(problems)}. Undo it with RESTORE TABLE {table} TO VERSION AS OF {version} "
            "(if nothing else was written since) and report the bug"
        )
    return PartitionBackfill(ds, int(old["rows"]), int(old["mismatched"]), commit.version, time.monotonic() - started)


def run(spark: SparkSession, config: BackfillConfig, *, progress: Progress | None = None) -> BackfillSummary:
    """Backfill ``config.features`` into the table's partitions from ``config.start`` to ``config.end``."""
    started = time.monotonic()
    say = progress or silent
    registry = load_dataset(config.dataset, config.registry_dir)
    features = [_derived_feature(registry, name) for name in config.features]
    validate_derived(spark, registry)
    if not spark.catalog.tableExists(table_name(config.dataset)):
        raise TableError(
            f"table {table_name(config.dataset)} does not exist; write a partition first "
            f"(featurehouse label-join --dataset {config.dataset} --ds ...)"
        )
    table, changes = prepare_for_write(spark, registry)
    for change in changes:
        say(f"{config.dataset}: {change.action.value} {change.detail}")
    days = tuple(format_ds(config.start + dt.timedelta(days=i)) for i in range((config.end - config.start).days + 1))
    present = sorted(
        parse_ds(r.ds)
        for r in spark.table(table).where(F.col("ds").between(days[0], days[-1])).select("ds").distinct().collect()
    )
    results = []
    for i, day in enumerate(present, start=1):
        say(f"backfill {', '.join(config.features)} ds={format_ds(day)} ({i}/{len(present)})")
        result = backfill_partition(spark, table, features, day)
        if result.version is not None:
            stats = refresh_partition_stats(spark, registry, day, table=table, version=result.version)
            result = replace(result, stats_version=stats.catalog_version, seconds=result.seconds + stats.elapsed_s)
        results.append(result)
        say(f"  {result.format()}")
    return BackfillSummary(
        config.dataset, tuple((f.name, f.derived or "") for f in features), table, days, tuple(results),
        time.monotonic() - started,
    )


def parse_args(argv: Sequence[str] | None = None) -> BackfillConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse backfill",
        description="Fill derived features into past partitions of featurehouse.<dataset>, one Delta commit per "
        "partition, verifying that no other column changed. Partitions already filled are skipped.",
    )
    parser.add_argument("--dataset", required=True, help="dataset name; its registry is <registry-dir>/<dataset>.yaml")
    parser.add_argument("--feature", dest="features", action="append", required=True,
                        help="a derived feature to fill (it has a derived: expression); repeat it to fill several in "
                        "one rewrite of each partition")  # fmt: skip
    parser.add_argument("--from", dest="start", required=True, help="first ds to fill, YYYY-MM-DD")
    parser.add_argument("--to", dest="end", required=True, help="last ds to fill, YYYY-MM-DD (inclusive)")
    add_common_arguments(parser)
    add_engine_argument(parser)
    ns = parser.parse_args(argv)
    return BackfillConfig(
        dataset=ns.dataset,
        features=tuple(ns.features),
        start=parse_ds(ns.start, what="--from"),
        end=parse_ds(ns.end, what="--to"),
        **common_settings(ns), **engine_settings(ns),
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
