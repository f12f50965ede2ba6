"""``featurehouse catalog sync|stats``: keep the feature catalog in step with the registry and the data.

    featurehouse catalog sync                                   # every registry file -> featurehouse_catalog.features
    featurehouse catalog stats --dataset ads --ds 2026-11-01    # one partition's statistics -> feature_stats
    spark-submit etl/maintenance/catalog.py stats --dataset ads --ds 2026-11-01

``sync`` is idempotent: unchanged features keep their row (and ``updated_at``), and
nothing is written when nothing changed. ``stats`` computes a partition's statistics
in one read of its files and replaces that ds's rows; ``--ds`` repeats.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from schemas.config import SparkJobConfig
from schemas.errors import ConfigError
from schemas.names import format_ds, parse_ds, validate_name
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import load_dataset, registry_datasets
from warehouse import stats
from warehouse.catalog import ensure_catalog, sync_features
from warehouse.command import run_spark_job
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings

ACTIONS = ("sync", "stats")


@dataclass(frozen=True, kw_only=True)
class CatalogConfig(SparkJobConfig):
    action: str
    datasets: tuple[str, ...] = ()
    days: tuple[dt.date, ...] = ()

    def __post_init__(self) -> None:
        for dataset in self.datasets:
            validate_name("dataset", dataset)
        if self.action == "stats" and (len(self.datasets) != 1 or not self.days):
            raise ConfigError(
                "catalog stats needs exactly one --dataset and at least one --ds, e.g. "
                "featurehouse catalog stats --dataset ads --ds 2026-11-01"
            )

    def check_inputs(self) -> None:
        """Every dataset named (or, with none named, the registry folder) has a valid registry."""
        for dataset in self.datasets or registry_datasets(self.registry_dir):
            load_dataset(dataset, self.registry_dir)


@dataclass(frozen=True)
class CatalogSummary:
    lines: tuple[str, ...]

    def format(self) -> str:
        return "\n".join(self.lines)


def run(spark: SparkSession, config: CatalogConfig, *, progress: Progress | None = None) -> CatalogSummary:
    say = progress or silent
    ensure_catalog(spark)
    if config.action == "sync":
        results = []
        for dataset in config.datasets or registry_datasets(config.registry_dir):
            say(f"catalog sync {dataset}")
            results.append(sync_features(spark, load_dataset(dataset, config.registry_dir)).format())
        return CatalogSummary(tuple(results))
    registry = load_dataset(config.datasets[0], config.registry_dir)
    lines = []
    for i, day in enumerate(config.days, start=1):
        say(f"catalog stats {registry.dataset} ds={format_ds(day)} ({i}/{len(config.days)})")
        lines.append(stats.refresh_partition_stats(spark, registry, day, progress=say).format())
    return CatalogSummary(tuple(lines))


def parse_args(argv: Sequence[str] | None = None) -> CatalogConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse catalog",
        description="sync: load registry files into featurehouse_catalog.features (idempotent). stats: compute one "
        "partition's feature statistics (coverage, dense moments and quantiles, sparse list lengths and distinct "
        "ids, compressed bytes per column) and replace that ds's rows of featurehouse_catalog.feature_stats.",
    )
    parser.add_argument("action", choices=ACTIONS, help="sync: registry -> features; stats: data -> feature_stats")
    parser.add_argument("--dataset", action="append", default=[],
                        help="dataset name (repeatable for sync; default: every registry file; exactly one for stats)")
    parser.add_argument("--ds", action="append", default=[], help="partition, YYYY-MM-DD (stats; repeatable)")
    add_common_arguments(parser)
    add_engine_argument(parser)
    ns = parser.parse_args(argv)
    return CatalogConfig(
        action=ns.action,
        datasets=tuple(ns.dataset),
        days=tuple(parse_ds(d) for d in ns.ds),
        **common_settings(ns), **engine_settings(ns),
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
