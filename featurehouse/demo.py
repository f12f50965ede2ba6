"""``featurehouse demo``: the main job, end to end on the embedded default.

1. generate N days (default 7) of seeded impression and label logs into the landing zone, plus
   one more day logged by a broken release, and plant malformed records into day 2
   (``featurehouse/demo_faults.py``);
2. drop what an earlier run left of the dataset (its table and catalog rows), sync the
   registry into the feature catalog, then label-join each day into the Delta
   table ``featurehouse.<dataset>`` (one Spark session: on the home's engine, or with ``--engine off``
   a session of the demo's own), evolving the schema on the way
   as the registry's history says (``featurehouse/demo_catalog.py``): a feature added on
   day 3, a rename on day 4, a deprecation on day 5, derived features on day 6 that are
   backfilled into days 1-5; each change shown by ``features diff`` and run by ``features apply``.
   Every day goes through the quarantine and the quality gate: day 2's bad records are
   quarantined and the day published; the broken release's day fails the gate and is not published;
3. (each join and each backfilled partition writes its feature statistics into the catalog: no step of its own);
4. read the demo training job ``jobs/ctr_demo.yaml`` through the reader (no JVM) and record it;
5. train DLRM on days 1-6 and evaluate on day 7 with two jobs that read different features
   (``jobs/ctr_demo.yaml``: user, item and context; ``jobs/ctr_context.yaml``: context only), each
   recorded in the catalog with its bytes, samples/s and stall fraction;
6. stream the same landing zone through ``featurehouse stream`` (files, available-now) into
   ``featurehouse.<dataset>_stream`` and compare its last closed day with the batch partition
   (``featurehouse/demo_stream.py``, in the demo's own session: on the engine, its micro-batches run in
   the engine's Python worker);
7. print each step's summary and the answers to SQL questions over the table and the catalog.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from featurehouse.demo_catalog import CATALOG_QUESTIONS, dump, registry_as_of
from featurehouse.demo_faults import break_release, plant_malformed
from featurehouse.demo_stream import stream_and_compare
from schemas.errors import DataRefusedError
from schemas.exit import run_command
from schemas.names import parse_ds, validate_name
from schemas.paths import landing_location
from schemas.progress import stderr_progress
from warehouse.flags import add_common_arguments, add_engine_argument, common_settings, engine_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from schemas.registry import DatasetRegistry

DEMO_JOB = Path(__file__).resolve().parent.parent / "jobs" / "ctr_demo.yaml"
TRAIN_JOBS = (DEMO_JOB, DEMO_JOB.with_name("ctr_context.yaml"))

DEMO_QUERY = """
SELECT ds,
       count(*)                                   AS impressions,
       sum(label_click)                           AS clicks,
       round(avg(label_click), 4)                 AS ctr,
       sum(label_conversion)                      AS conversions,
       round(sum(label_conversion) / sum(label_click), 4) AS cvr_per_click,
       round(avg(cardinality(user_interest_topic_ids)), 2) AS avg_topics
FROM featurehouse.{dataset}
GROUP BY ds
ORDER BY ds
"""


@dataclass(frozen=True)
class DemoConfig:
    home: Path
    dataset: str = "ads"
    start: dt.date = dt.date(2026, 11, 1)
    days: int = 7
    impressions_per_day: int = 20_000
    seed: int = 7
    registry_dir: Path | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    engine: str | None = "auto"  # on the home's engine (warehouse.engine); "off": a session of the demo's own
    engine_url: str | None = None

    def __post_init__(self) -> None:
        validate_name("dataset", self.dataset)


def run(config: DemoConfig) -> None:
    """Run the demo; print progress to stderr and the summaries to stdout."""
    from etl import label_join
    from etl.generate import job as generate
    from schemas.registry import DEFAULT_REGISTRY_DIR, load_dataset
    from warehouse import evolution, sql
    from warehouse.catalog import sync_features
    from warehouse.session import spark_session

    started = time.monotonic()
    stderr_progress(f"generating {config.days + 1} days x {config.impressions_per_day:,} impressions under {config.home} "
                    "(the last day as a broken release logs it)")
    gen_summary = generate.run(
        generate.GenerateConfig(
            home=config.home,
            dataset=config.dataset,
            registry_dir=config.registry_dir,
            start=config.start,
            days=config.days + 1,  # the last one is logged by a broken release (demo_faults.py)
            impressions_per_day=config.impressions_per_day,
            seed=config.seed,
        ),
        progress=stderr_progress,
    )
    print(gen_summary.format(), "", sep="\n", flush=True)
    final = yaml.safe_load(((config.registry_dir or DEFAULT_REGISTRY_DIR) / f"{config.dataset}.yaml").read_text())
    staged_dir = config.home / "registry"
    staged_dir.mkdir(parents=True, exist_ok=True)
    days = [config.start + dt.timedelta(days=i) for i in range(config.days)]
    broken = config.start + dt.timedelta(days=config.days)
    landing = Path(landing_location(config.home))
    faults = (plant_malformed(landing, days[1]) if len(days) > 1 else []) + break_release(landing, broken, seed=config.seed)
    say("planted faults (featurehouse/demo_faults.py)", "\n".join(f"  {fault}" for fault in faults))
    with spark_session(config.home, conf=config.spark_conf, engine=config.engine, remote=config.engine_url) as spark:
        _start_from_scratch(spark, config.dataset, config.home)
        previous = None
        for i, day in enumerate([*days, broken]):
            staged = registry_as_of(final, day, rename_on=config.start + dt.timedelta(days=3))
            if staged != previous:
                (staged_dir / f"{config.dataset}.yaml").write_text(dump(staged, day))
                registry = load_dataset(config.dataset, staged_dir)
                if previous is None:
                    say(f"featurehouse catalog sync --registry-dir {staged_dir}", sync_features(spark, registry).format())
                else:
                    plan = evolution.make_plan(spark, registry)
                    say(f"ds={day}: the registry changed; featurehouse features diff --dataset {config.dataset}",
                        plan.format())  # fmt: skip
                    say("featurehouse features apply", evolution.apply(spark, registry).format())
                    _backfill_new(spark, registry, previous, config, staged_dir, first=days[0], last=day)
                previous = staged
            stderr_progress(f"label join {i + 1}/{config.days + 1}: ds={day}")
            try:
                summary = label_join.run(
                    spark,
                    label_join.LabelJoinConfig(dataset=config.dataset, ds=day, home=config.home, registry_dir=staged_dir),
                    progress=stderr_progress,
                )
                print(summary.format(), "", sep="\n", flush=True)
            except DataRefusedError as refused:  # the broken release's day: shown, not published
                print(refused.details, f"error: {refused}", "", sep="\n", flush=True)
        if config.dataset == "ads":
            from ingest import read_command

            lines: list[str] = []
            read_command.run(read_command.ReadConfig(job=DEMO_JOB, home=config.home, registry_dir=staged_dir), progress=lines.append)
            say(f"featurehouse read --job {DEMO_JOB.relative_to(DEMO_JOB.parent.parent)}", "\n".join(lines))
            _train(spark, config, staged_dir)
        say(f"featurehouse stream --dataset {config.dataset}_stream --source files --trigger available-now",
            stream_and_compare(spark, config.home, config.dataset, final, days[-1], staged_dir,
                               rename_on=config.start + dt.timedelta(days=3)))  # fmt: skip
        statement = DEMO_QUERY.format(dataset=config.dataset).strip()
        say("featurehouse sql \"" + " ".join(statement.split()) + "\"",
            sql.run(spark, sql.SqlConfig(statement=statement, home=config.home)).format())  # fmt: skip
        if config.dataset == "ads":
            for question, statement in CATALOG_QUESTIONS:
                say(f"-- {question}\n{statement}", sql.run(spark, sql.SqlConfig(statement=statement, home=config.home)).format())
    print(f"demo finished in {time.monotonic() - started:.0f}s; data under {config.home}")


def _train(spark: SparkSession, config: DemoConfig, staged_dir: Path) -> None:
    """Train and evaluate each demo job (no JVM in the trainer; Spark only tells the table's size here)."""
    from trainer import train

    table_bytes = spark.sql(f"DESCRIBE DETAIL featurehouse.{config.dataset}").first()["sizeInBytes"]
    for path in TRAIN_JOBS:
        lines: list[str] = []
        stderr_progress(f"training {path.name} (days 1-6, evaluated on day 7)")
        result = train.run(train.TrainConfig(job=path, home=config.home, registry_dir=staged_dir, restart=True),
                           progress=lines.append)  # fmt: skip
        cost = result.cost
        lines.append(f"  bytes read {cost.bytes_read:,} over its epochs and the evaluation: "
                     f"{cost.bytes_read / cost.bytes_all_columns:.1%} of what all columns of the same rows cost "
                     f"({cost.bytes_all_columns:,}); the whole table is {table_bytes:,} bytes")  # fmt: skip
        say(f"featurehouse train --job {path.relative_to(path.parent.parent)}", "\n".join(lines))


def _start_from_scratch(spark: SparkSession, dataset: str, home: Path) -> None:
    """Drop what an earlier demo run left of ``dataset``: the demo replays its registry's history from nothing."""
    import shutil

    from etl.records.quarantine import quarantine_table
    from schemas.catalog import FEATURE_STATS, FEATURE_USAGE, FEATURES, QUALITY_GATE, catalog_table
    from schemas.sql_text import literal
    from warehouse.publish import STAGING_DATABASE
    from warehouse.tables import table_name

    for table in (table_name(dataset), quarantine_table(dataset)):
        if spark.catalog.tableExists(table):
            stderr_progress(f"dropping {table}, left by an earlier demo run")
            spark.sql(f"DROP TABLE {table}")
    if spark.catalog.databaseExists(STAGING_DATABASE):
        for staged in spark.catalog.listTables(STAGING_DATABASE):
            if staged.name.startswith(f"{dataset}_"):
                spark.sql(f"DROP TABLE {STAGING_DATABASE}.{staged.name}")
    for name in (FEATURES, FEATURE_STATS, FEATURE_USAGE, QUALITY_GATE):
        if spark.catalog.tableExists(catalog_table(name)):
            spark.sql(f"DELETE FROM {catalog_table(name)} WHERE dataset = {literal(dataset)}")
    shutil.rmtree(home / "quality" / dataset, ignore_errors=True)


def say(command: str, output: str) -> None:
    """Print a command (or question) and its output, as a reader of the demo's log wants to see them."""
    print(command, output, "", sep="\n", flush=True)


def _backfill_new(
    spark: SparkSession, registry: DatasetRegistry, previous: dict, config: DemoConfig, staged_dir: Path, *,
    first: dt.date, last: dt.date,
) -> None:
    """Backfill the derived features this registry change added into the days already written (one rewrite of
    each day for all of them)."""
    from etl.maintenance import backfill

    before = {f["name"] for f in previous["features"]}
    added = tuple(f.name for f in registry.derived_features if f.name not in before)
    if not added or last <= first:
        return
    end = last - dt.timedelta(days=1)
    result = backfill.run(
        spark,
        backfill.BackfillConfig(dataset=config.dataset, features=added, start=first, end=end, home=config.home,
                                registry_dir=staged_dir),  # fmt: skip
        progress=stderr_progress,
    )
    flags = " ".join(f"--feature {name}" for name in added)
    say(f"featurehouse backfill --dataset {config.dataset} {flags} --from {first} --to {end}", result.format())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="ads", help="dataset to build (default: ads, the demo registry)")
    parser.add_argument("--start", default="2026-11-01", help="first ds, YYYY-MM-DD (default 2026-11-01)")
    parser.add_argument("--days", type=int, default=7, help="days of impressions (default 7)")
    parser.add_argument("--impressions-per-day", type=int, default=20_000, help="impressions per day (default 20,000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the generator (default 7)")
    add_common_arguments(parser)
    add_engine_argument(parser)


def config_from_args(ns: argparse.Namespace) -> DemoConfig:
    return DemoConfig(
        dataset=ns.dataset,
        start=parse_ds(ns.start, what="--start"),
        days=ns.days,
        impressions_per_day=ns.impressions_per_day,
        seed=ns.seed,
        **common_settings(ns),
        **engine_settings(ns),
    )


def parse_args(argv: Sequence[str] | None = None) -> DemoConfig:
    parser = argparse.ArgumentParser(prog="featurehouse demo", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: run(parse_args(argv)))
