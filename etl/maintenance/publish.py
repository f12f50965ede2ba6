"""Publish a partition the quality gate refused: after a fix, or on purpose with ``--force``.

    featurehouse publish --dataset ads --ds 2026-11-08                    # validate the staged rows again
    featurehouse publish --dataset ads --ds 2026-11-08 --force --reason "holiday traffic, rates are real"

The label join and the Criteo import keep a refused partition in its staging table
(``featurehouse_staging.<dataset>_<yyyymmdd>_<run>``) and records the refusal in
``featurehouse_catalog.quality_gate``. This command takes the latest refused run of the ds (or
``--run``):

* without ``--force`` it validates the staged rows again (against the registry and the history
  as they are now, e.g. after a tolerance was widened) and publishes only if they pass (a new
  refusal is recorded otherwise);
* with ``--force`` it publishes them as they are; ``--reason`` is required, and who (``--by``,
  default the OS user) and why are recorded in the catalog with the failures that were overridden.

Either way the publish is one atomic Delta commit replacing the ds, and the staging table is
dropped once published.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from schemas.config import DatasetJobConfig
from schemas.errors import ConfigError, DataRefusedError, TableError
from schemas.names import format_ds, parse_ds
from schemas.progress import Progress, silent, stderr_progress
from schemas.registry import load_dataset
from warehouse.command import run_spark_job
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings
from warehouse.publish import (
    Decision,
    Override,
    audit_and_publish,
    check_run_id,
    last_decision,
)
from warehouse.tables import table_name


@dataclass(frozen=True, kw_only=True)
class PublishConfig(DatasetJobConfig):
    ds: dt.date
    run_id: str | None = None
    force: bool = False
    reason: str | None = None
    by: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.run_id is not None:
            check_run_id(self.run_id)
        if self.force and not (self.reason or "").strip():
            raise ConfigError("--force needs --reason 'why this partition is published although it failed its checks'; "
                              "the reason is recorded in featurehouse_catalog.quality_gate")  # fmt: skip


@dataclass(frozen=True)
class PublishSummary:
    dataset: str
    ds: str
    run_id: str
    decision: str
    table: str
    version: int
    rows: int
    overridden: tuple[str, ...]
    by: str
    reason: str | None

    def format(self) -> str:
        lines = [f"publish {self.dataset} ds={self.ds} run {self.run_id}: {self.decision} into {self.table} "
                 f"(Delta version {self.version}, {self.rows:,} rows) by {self.by}"]  # fmt: skip
        if self.reason:
            lines.append(f"  reason             {self.reason}")
        lines += [f"  overridden         {line}" for line in self.overridden]
        return "\n".join(lines)


def run(spark: SparkSession, config: PublishConfig, *, progress: Progress | None = None) -> PublishSummary:
    say = progress or silent
    ds = format_ds(config.ds)
    table = table_name(config.dataset)
    refused = last_decision(spark, config.dataset, config.ds, config.run_id)
    which = f"run {config.run_id}" if config.run_id else "any run"
    if refused is None:
        raise TableError(f"the quality gate has no decision on {config.dataset} ds {ds} ({which}); run "
                         f"`featurehouse label-join --dataset {config.dataset} --ds {ds}` first")  # fmt: skip
    if refused["decision"] != Decision.REFUSED:
        raise TableError(
            f"the latest run of {config.dataset} ds {ds} ({refused['run_id']}) was already {refused['decision']} at "
            f"{refused['decided_at']:%Y-%m-%d %H:%M:%S}; there is nothing refused to publish (pass --run for an older one)"
        )
    staged = refused["staging_table"]
    if not spark.catalog.tableExists(staged):
        raise TableError(f"the staged rows of run {refused['run_id']} ({staged}) are gone (dropped by hand?); rerun "
                         f"the job that staged them: `featurehouse label-join --dataset {config.dataset} --ds {ds}`, "
                         f"or `featurehouse import criteo` of that day's file")  # fmt: skip
    registry = load_dataset(config.dataset, config.registry_dir)
    override = None
    if config.force:
        override = Override(by=config.by or getpass.getuser(), reason=config.reason or "",
                            failed=tuple(refused["failed_expectations"] or ()), expectations=refused["expectations"],
                            report_path=refused["report_path"])  # fmt: skip
    else:
        say(f"{config.dataset} ds={ds}: validating {staged} again")
    gate = audit_and_publish(spark, registry, spark.table(staged), table=table, day=config.ds,
                             run_id=refused["run_id"], home=config.home, staged=staged, override=override, progress=say)  # fmt: skip
    if not gate.published:
        raise DataRefusedError(
            f"{staged} still fails {len(gate.report.failures)} of {len(gate.report.checks)} expectations; nothing was "
            f"published. Fix the cause and rerun the label join or import, or publish it on purpose with "
            f"--force --reason '...'",
            details="\n".join(gate.report.summary_lines()),
        )
    decision = Decision.FORCED if override else Decision.PUBLISHED
    return PublishSummary(config.dataset, ds, refused["run_id"], decision.value, table, gate.commit.version,
                          gate.commit.rows, override.failed if override else (),
                          override.by if override else "quality gate", config.reason if config.force else None)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="dataset name, e.g. ads")
    parser.add_argument("--ds", required=True, help="the refused partition, YYYY-MM-DD")
    parser.add_argument("--run", default=None,
                        help="the label join or import run to publish (default: the latest refused one)")  # fmt: skip
    parser.add_argument("--force", action="store_true",
                        help="publish without validating again, overriding the failed expectations (needs --reason)")
    parser.add_argument("--reason", default=None, help="why it is forced; recorded in featurehouse_catalog.quality_gate")
    parser.add_argument("--by", default=None, help="who forces it (default: the OS user)")
    add_common_arguments(parser)
    add_engine_argument(parser)


def parse_args(argv: Sequence[str] | None = None) -> PublishConfig:
    parser = argparse.ArgumentParser(prog="featurehouse publish", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    ns = parser.parse_args(argv)
    return PublishConfig(dataset=ns.dataset, ds=parse_ds(ns.ds), run_id=ns.run, force=ns.force, reason=ns.reason,
                         by=ns.by, **common_settings(ns), **engine_settings(ns))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(lambda: parse_args(argv), lambda spark, config: run(spark, config, progress=stderr_progress))


if __name__ == "__main__":
    raise SystemExit(main())
