"""``featurehouse features diff|apply``: show, then apply, what a registry change does to its table.

    featurehouse features diff  --dataset ads    # the plan; changes nothing
    featurehouse features apply --dataset ads    # the table changes, then the catalog sync

Lines of a plan: ``+`` add column (or create the table), ``~`` rename column,
``-`` drop column, ``^`` enable column mapping, ``!`` deprecate, ``*`` catalog-only
change. See ``warehouse/evolution.py`` for the rules.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from schemas.config import DatasetJobConfig
from schemas.registry import load_dataset
from warehouse import evolution
from warehouse.command import Summary, run_spark_job
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings

ACTIONS = ("diff", "apply")


@dataclass(frozen=True, kw_only=True)
class FeaturesConfig(DatasetJobConfig):
    action: str


@dataclass(frozen=True)
class _DiffSummary:
    plan: evolution.Plan

    def format(self) -> str:
        text = self.plan.format()
        if self.plan.changes:
            text += f"\nrun `featurehouse features apply --dataset {self.plan.registry.dataset}` to apply it"
        return text


def run(spark: SparkSession, config: FeaturesConfig) -> Summary:
    registry = load_dataset(config.dataset, config.registry_dir)
    if config.action == "diff":
        return _DiffSummary(evolution.make_plan(spark, registry))
    return evolution.apply(spark, registry)


def parse_args(argv: Sequence[str] | None = None) -> FeaturesConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse features",
        description="Compare a dataset's registry file with its Delta table and the catalog (diff), or apply the "
        "changes (apply): add, rename (column mapping) and drop columns without rewriting data files, then sync "
        "the catalog. A changed kind or dtype is refused.",
    )
    parser.add_argument("action", choices=ACTIONS, help="diff: show the plan; apply: run it")
    parser.add_argument("--dataset", required=True, help="dataset name; its registry is <registry-dir>/<dataset>.yaml")
    add_common_arguments(parser)
    add_engine_argument(parser)
    ns = parser.parse_args(argv)
    return FeaturesConfig(action=ns.action, dataset=ns.dataset, **common_settings(ns), **engine_settings(ns))


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), run)


if __name__ == "__main__":
    raise SystemExit(main())
