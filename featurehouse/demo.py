"""``featurehouse demo``: the main job, end to end on the embedded default.

1. generate N days (default 7) of seeded impression and label logs into the landing zone;
2. label-join each day into the Delta table ``featurehouse.<dataset>`` (one Spark session);
3. print each day's summary and the answer to one SQL query over the table.

Later steps (catalog, reader, trainer) extend this same command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from schemas.errors import run_command
from schemas.names import parse_ds, validate_name
from warehouse.jobs import add_common_arguments, common_settings, stderr_progress

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

    def __post_init__(self) -> None:
        validate_name("dataset", self.dataset)


def run(config: DemoConfig) -> None:
    """Run the demo; print progress to stderr and the summaries to stdout."""
    from etl import generate, label_join
    from warehouse import sql
    from warehouse.session import spark_session

    started = time.monotonic()
    stderr_progress(f"generating {config.days} days x {config.impressions_per_day:,} impressions under {config.home}")
    gen_summary = generate.run(
        generate.GenerateConfig(
            home=config.home,
            dataset=config.dataset,
            registry_dir=config.registry_dir,
            start=config.start,
            days=config.days,
            impressions_per_day=config.impressions_per_day,
            seed=config.seed,
        ),
        progress=stderr_progress,
    )
    print(gen_summary.format(), "", sep="\n", flush=True)
    with spark_session(config.home, conf=config.spark_conf) as spark:
        for i in range(config.days):
            day = config.start + dt.timedelta(days=i)
            stderr_progress(f"label join {i + 1}/{config.days}: ds={day}")
            summary = label_join.run(
                spark,
                label_join.LabelJoinConfig(
                    dataset=config.dataset, ds=day, home=config.home, registry_dir=config.registry_dir
                ),
                progress=stderr_progress,
            )
            print(summary.format(), "", sep="\n", flush=True)
        statement = DEMO_QUERY.format(dataset=config.dataset).strip()
        result = sql.run(spark, sql.SqlConfig(statement=statement, home=config.home))
    print("featurehouse sql \"" + " ".join(statement.split()) + "\"")
    print(result.format())
    print(f"\ndemo finished in {time.monotonic() - started:.0f}s; data under {config.home}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="ads", help="dataset to build (default: ads, the demo registry)")
    parser.add_argument("--start", default="2026-11-01", help="first ds, YYYY-MM-DD (default 2026-11-01)")
    parser.add_argument("--days", type=int, default=7, help="days of impressions (default 7)")
    parser.add_argument("--impressions-per-day", type=int, default=20_000, help="impressions per day (default 20,000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the generator (default 7)")
    add_common_arguments(parser)


def config_from_args(ns: argparse.Namespace) -> DemoConfig:
    return DemoConfig(
        dataset=ns.dataset,
        start=parse_ds(ns.start, what="--start"),
        days=ns.days,
        impressions_per_day=ns.impressions_per_day,
        seed=ns.seed,
        **common_settings(ns),
    )


def parse_args(argv: Sequence[str] | None = None) -> DemoConfig:
    parser = argparse.ArgumentParser(prog="featurehouse demo", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: run(parse_args(argv)))
