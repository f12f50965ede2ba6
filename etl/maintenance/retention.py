"""Drop partitions older than each dataset's retention, then vacuum. A dry run unless ``--apply``.

    featurehouse retention                                   # every dataset with a retention: what would go
    featurehouse retention --dataset ads --apply             # drop ads' expired partitions, then vacuum
    featurehouse retention --as-of 2026-11-30 --apply        # measure retention from another day
    spark-submit etl/maintenance/retention.py --dataset ads --apply

A registry file sets ``retention: 365d``; a dataset without it keeps every partition and is
skipped (naming it with ``--dataset`` is an error). The cutoff is ``--as-of`` (default: today,
UTC) minus the retention: partitions with ds < cutoff expire, in the feature table
``featurehouse.<dataset>`` and the quarantine table ``featurehouse_quarantine.<dataset>``, each
if it exists. Partitions on or after the cutoff are never touched.

A dry run lists the expired partitions with their row counts (one aggregation per table) and
writes nothing. ``--apply``, per table:

* ``DELETE FROM <table> WHERE ds < '<cutoff>'``: one Delta commit. The predicate is on the
  partition column, so whole files are removed and none is rewritten.
* ``VACUUM <table>`` with the table's own file retention (``delta.deletedFileRetentionDuration``,
  7 days by default; never shorter): the files just removed stay on disk until it has passed, so
  a reader pinned to an older version (a training job's snapshot) keeps working until then.
  VACUUM runs only when it has files to delete (even an empty one commits to the log), and lists
  the folder with one task per core unless ``spark.sql.sources.parallelPartitionDiscovery.parallelism``
  is set (Spark's default, 10,000 tasks, costs ~40 s even on a small local table).

A second ``--apply`` finds nothing to drop and commits nothing. The feature catalog's rows
(``featurehouse_catalog.feature_stats``, ``quality_gate``) of dropped partitions are left alone:
they are the history of the data, not the data.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from etl.records.quarantine import quarantine_table
from schemas.config import SparkJobConfig
from schemas.errors import ConfigError
from schemas.names import format_ds, parse_ds, validate_name
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import (
    PARTITION_COLUMN,
    DatasetRegistry,
    load_dataset,
    registry_datasets,
)
from warehouse.command import run_spark_job
from warehouse.confs import runtime_confs
from warehouse.session import is_connect
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.tables import current_version, retry_conflicts, table_name, table_properties

#: Delta's default of ``delta.deletedFileRetentionDuration``, what VACUUM keeps when the table sets none.
DEFAULT_FILE_RETENTION = "interval 1 week"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


@dataclass(frozen=True, kw_only=True)
class RetentionConfig(SparkJobConfig):
    datasets: tuple[str, ...] = ()  # empty: every registry file that sets a retention
    as_of: dt.date = field(default_factory=utc_today)
    apply: bool = False

    def __post_init__(self) -> None:
        for dataset in self.datasets:
            validate_name("dataset", dataset)


@dataclass(frozen=True)
class TableRetention:
    """One table's expired partitions, and with ``--apply`` what was done about them."""

    table: str
    exists: bool
    expired: tuple[tuple[str, int], ...] = ()  # (ds, rows), ds < cutoff, in order
    kept: tuple[str, ...] = ()  # the other partitions, in order
    version_before: int | None = None
    version_after: int | None = None  # apply only
    rows_removed: int = 0  # apply: what the DELETE reports
    vacuum_files: int = 0  # files VACUUM deleted (apply), or would delete now (dry run)
    file_retention: str = DEFAULT_FILE_RETENTION

    def format(self, apply: bool) -> list[str]:
        if not self.exists:
            return [f"{self.table}: no table"]
        if not self.expired:
            head = f"nothing to drop from {self.table}"
        else:
            rows = self.rows_removed if apply else sum(n for _ds, n in self.expired)
            head = (f"{'dropped' if apply else 'would drop'} {len(self.expired)} partitions "
                    f"(ds {self.expired[0][0]} .. {self.expired[-1][0]}, {rows:,} rows) from {self.table}")  # fmt: skip
        version = f"Delta version {self.version_before}" + (f" -> {self.version_after}" if apply else "")
        kept = f"{len(self.kept)} partitions kept" + (f" (ds {self.kept[0]} .. {self.kept[-1]})" if self.kept else "")
        kept_for = self.file_retention.removeprefix("interval ")
        vacuum = (f"vacuum: {'deleted' if apply else 'would delete'} {self.vacuum_files:,} files now (files removed "
                  f"less than {kept_for} ago stay for readers of older versions)")  # fmt: skip
        return [f"{head} ({version}); {kept}", *(f"  ds={ds}: {n:,} rows" for ds, n in self.expired), f"  {vacuum}"]


@dataclass(frozen=True)
class DatasetRetention:
    dataset: str
    retention: dt.timedelta | None  # None: the dataset keeps its partitions forever (skipped)
    cutoff: dt.date | None = None
    tables: tuple[TableRetention, ...] = ()

    def format(self, apply: bool) -> list[str]:
        if self.retention is None:
            return [f"{self.dataset}: no retention set, partitions kept forever (skipped)"]
        lines = [f"{self.dataset}: retention {self.retention.days}d, cutoff {self.cutoff} (ds < {self.cutoff} expire)"]
        return lines + [f"  {line}" for t in self.tables for line in t.format(apply)]


@dataclass(frozen=True)
class RetentionSummary:
    as_of: dt.date
    apply: bool
    datasets: tuple[DatasetRetention, ...]

    def format(self) -> str:
        mode = "apply" if self.apply else "dry run: nothing written; --apply drops and vacuums"
        tables = [t for d in self.datasets for t in d.tables if t.expired]
        partitions = sum(len(t.expired) for t in tables)
        if self.apply:
            total = f"dropped {partitions} partitions, {sum(t.rows_removed for t in tables):,} rows"
        else:
            total = f"would drop {partitions} partitions, {sum(n for t in tables for _ds, n in t.expired):,} rows"
        return "\n".join([
            f"retention as of {self.as_of} ({mode})",
            *(f"  {line}" for d in self.datasets for line in d.format(self.apply)),
            f"  {total}, from {len(tables)} tables",
        ])  # fmt: skip


def chosen_registries(config: RetentionConfig) -> list[DatasetRegistry]:
    """The registries of ``--dataset`` (each must set a retention), else of every registry file."""
    if not config.datasets:
        return [load_dataset(name, config.registry_dir) for name in registry_datasets(config.registry_dir)]
    registries = [load_dataset(name, config.registry_dir) for name in dict.fromkeys(config.datasets)]
    for registry in registries:
        if registry.retention is None:
            raise ConfigError(
                f"dataset {registry.dataset!r} has no retention: {registry.source} sets no 'retention:', so its "
                f"partitions are kept forever; add e.g. `retention: 365d` to that file, or leave out "
                f"--dataset {registry.dataset}"
            )
    return registries


def _listing_tasks(spark: SparkSession) -> AbstractContextManager[None]:
    """VACUUM lists the table's folder in ``LISTING_PARALLELISM`` tasks; Spark's default, 10,000, takes
    ~40 s on a small local table. Unless set (``--conf``), use Spark's default parallelism (one task per core of
    a local Spark) while the block runs; a session on an engine reads it from the engine's settings."""
    if is_connect(spark):  # local Spark's default is the cores, of this machine on the embedded default
        parallelism = spark.conf.get("spark.default.parallelism", None) or str(os.cpu_count() or 1)
    else:
        parallelism = str(spark.sparkContext.defaultParallelism)
    return runtime_confs(spark, {LISTING_PARALLELISM: parallelism}, keep_set=True)


def _vacuum(spark: SparkSession, table: str, *, apply: bool) -> int:
    """The files VACUUM (with the table's own retention) deletes now; it runs only when there are some.

    Its dry run also lists the directories an earlier VACUUM emptied (partition and random-prefix
    folders, names without a dot, unlike every file Delta writes); they alone do not start one,
    so a second run commits nothing. The next VACUUM that deletes files removes them too.
    """
    with _listing_tasks(spark):
        paths = [row[0] for row in spark.sql(f"VACUUM {table} DRY RUN").collect()]
        files = sum(1 for path in paths if "." in path.rstrip("/").rsplit("/", 1)[-1])
        if apply and files:
            spark.sql(f"VACUUM {table}")
    return files


def expire_table(spark: SparkSession, table: str, cutoff_day: dt.date, *, apply: bool, progress: Progress
                 ) -> TableRetention:  # fmt: skip
    """List ``table``'s partitions with ds < ``cutoff_day``; with ``apply``, delete them and vacuum."""
    cutoff = format_ds(cutoff_day)  # compared with the ds strings of the table, and in the DELETE's text
    if not spark.catalog.tableExists(table):
        progress(f"{table}: no table")
        return TableRetention(table, exists=False)
    before = current_version(spark, table)
    properties = table_properties(spark, table)
    file_retention = properties.get("delta.deletedFileRetentionDuration", DEFAULT_FILE_RETENTION)
    progress(f"{table}: counting rows per partition at Delta version {before}")
    at_before = spark.read.option("versionAsOf", before).table(table)
    counts = sorted((r[0], int(r[1])) for r in at_before.groupBy(PARTITION_COLUMN).count().collect())
    expired = tuple((ds, n) for ds, n in counts if ds < cutoff)
    removed = 0
    if expired and apply:
        delete = f"DELETE FROM {table} WHERE {PARTITION_COLUMN} < '{cutoff}'"
        progress(f"{table}: {delete} ({len(expired)} partitions)")
        removed = int(retry_conflicts(lambda: spark.sql(delete).first()["num_affected_rows"]))
    elif expired:
        progress(f"{table}: would drop {len(expired)} partitions (ds {expired[0][0]} .. {expired[-1][0]})")
    progress(f"{table}: VACUUM{'' if apply else ' DRY RUN'} (file retention {file_retention})")
    files = _vacuum(spark, table, apply=apply)
    return TableRetention(
        table, True, expired, tuple(ds for ds, _n in counts if ds >= cutoff), before,
        version_after=current_version(spark, table) if apply else None, rows_removed=removed, vacuum_files=files,
        file_retention=file_retention,
    )  # fmt: skip


def run(spark: SparkSession, config: RetentionConfig, *, progress: Progress | None = None) -> RetentionSummary:
    """Apply (or, by default, only report) every chosen dataset's retention as of ``config.as_of``."""
    say = progress or silent
    results = []
    for registry in chosen_registries(config):
        if registry.retention is None:
            say(f"{registry.dataset}: no retention set, skipped")
            results.append(DatasetRetention(registry.dataset, None))
            continue
        cutoff = config.as_of - registry.retention
        say(f"{registry.dataset}: retention {registry.retention.days}d, dropping ds < {cutoff}"
            + ("" if config.apply else " (dry run)"))  # fmt: skip
        tables = tuple(
            expire_table(spark, table, cutoff, apply=config.apply, progress=say)
            for table in (table_name(registry.dataset), quarantine_table(registry.dataset))
        )
        results.append(DatasetRetention(registry.dataset, registry.retention, cutoff, tables))
    return RetentionSummary(config.as_of, config.apply, tuple(results))


def parse_args(argv: Sequence[str] | None = None) -> RetentionConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse retention",
        description="Drop partitions older than each dataset's retention (registry key `retention: 365d`) from "
        "featurehouse.<dataset> and featurehouse_quarantine.<dataset>, one DELETE commit per table, then VACUUM "
        "with the table's own file retention. A dry run unless --apply.",
    )
    parser.add_argument("--dataset", action="append", default=[],
                        help="dataset name, repeatable (default: every registry file that sets a retention)")
    parser.add_argument("--as-of", help="the day retention is measured from, YYYY-MM-DD (default: today, UTC)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only report what would be dropped (the default)")
    mode.add_argument("--apply", action="store_true", help="drop the expired partitions, then vacuum")
    add_common_arguments(parser)
    add_engine_argument(parser)
    ns = parser.parse_args(argv)
    config = RetentionConfig(
        datasets=tuple(ns.dataset),
        as_of=utc_today() if ns.as_of is None else parse_ds(ns.as_of, what="--as-of"),
        apply=ns.apply,
        **common_settings(ns), **engine_settings(ns),
    )
    chosen_registries(config)  # a bad registry or --dataset fails here, before Spark starts
    return config


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
