"""A small day's label join in a session already started: the summary's elapsed and its Spark jobs, with the
catalog statistics, without them (``--no-stats``), and with a large day's plans (the code generation and adaptive
execution a small day skips, warehouse/confs.py, turned back on as a user's --conf would), alternating, median of the runs after a
warm-up.

    .venv/bin/python -m bench.small_day --impressions 100 --runs 3

The issue's target for a 100-impression day is 6 s of job time; the fixed cost (Spark jobs, Delta
commits, the gate) is what this measures, so it prints the last run's job list of each contender.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import tempfile
from pathlib import Path

from bench.common import figure, ratio, rounds, say, spread

DS = dt.date(2026, 11, 1)


class Join:
    """One ``etl.label_join.run`` of the generated day; its own elapsed (the summary's) and job count."""

    def __init__(self, spark, config, confs: dict[str, str] | None = None) -> None:
        self.spark, self.config, self.confs, self.last = spark, config, confs or {}, None

    def __call__(self) -> dict:
        from etl import label_join
        from warehouse.confs import runtime_confs

        with runtime_confs(self.spark, self.confs):  # set as a user's --conf: the join keeps them
            self.last = label_join.run(self.spark, self.config)
        return {"seconds": self.last.elapsed_s, "spark_jobs": self.last.spark_jobs}


#: Code generation and adaptive execution on, as a large day runs (and every day did before 2026-12-04).
COMPILED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK",
            "spark.sql.adaptive.enabled": "true"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.small_day", description=__doc__.splitlines()[0])
    parser.add_argument("--impressions", type=int, default=100, help="impressions in the day (default 100)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each contender after a warm-up (>= 3)")
    args = parser.parse_args(argv)
    from etl import label_join
    from etl.generate import job as generate
    from warehouse.session import spark_session

    with tempfile.TemporaryDirectory(prefix="bench-small-day-") as scratch:
        home = Path(scratch)
        generate.run(generate.GenerateConfig(home=home, days=4, impressions_per_day=args.impressions, start=DS))
        with spark_session(home, conf={"spark.ui.enabled": "false"}) as spark:
            config = label_join.LabelJoinConfig(dataset="ads", ds=DS, home=home, explain_jobs=True)
            contenders = {"with statistics": Join(spark, config),
                          "--no-stats": Join(spark, dataclasses.replace(config, stats=False)),
                          "compiled, adaptive": Join(spark, config, COMPILED)}  # fmt: skip
            results = rounds(contenders, args.runs, label=f"{args.impressions:,}-impression day, ")
    for name, runs in results.items():
        jobs = sorted({r["spark_jobs"] for r in runs})
        say(f"{name}: {spread(figure(runs))} of job time, {'/'.join(map(str, jobs))} Spark jobs")
        print(f"{name}, the last run's jobs:", *contenders[name].last.job_list, sep="\n  ")
    share = ratio(results["with statistics"], results["--no-stats"])
    say(f"with / without the statistics: {share['median']:.2f}x (round by round, median of {args.runs})")
    compiled = ratio(results["compiled, adaptive"], results["with statistics"])
    say(f"compiled, adaptive / a small day's plans: {compiled['median']:.2f}x (round by round, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
