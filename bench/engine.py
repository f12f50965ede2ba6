"""The engine against a JVM per command: ``featurehouse sql "SELECT 1"`` and a small day's ``featurehouse label-join``,
each a fresh client process as a user runs it, on the home's engine (started once, before the warm-up) and with
``--engine off`` (a Spark session of the command's own, on a second data folder: Derby admits one JVM per folder),
alternating, median of the runs after a warm-up. Wall time of the whole command, process start included. Also the
engine's memory (its Python process and JVM, resident) idle after start and after the runs.

    .venv/bin/python -m bench.engine --runs 5 --impressions 100

The engine issue's targets: SELECT 1 at most 2 s, a 100-impression label join at most 5 s, on the engine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from bench.common import figure, ratio, rounds, say, spread

FEATUREHOUSE = str(Path(sys.executable).parent / "featurehouse")
DS = dt.date(2026, 11, 1)


class Command:
    """One featurehouse command in its own process on ``home``."""

    def __init__(self, home: Path, *args: str) -> None:
        self.home, self.args = home, args

    def __call__(self) -> dict:
        done = subprocess.run([FEATUREHOUSE, *self.args, "--home", str(self.home)], capture_output=True, text=True,
                              check=False)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"featurehouse {' '.join(self.args)} failed:\n{done.stderr[-3000:]}")
        if "starting the engine" in done.stderr:
            raise SystemExit("the engine was started inside a timed run (it stopped, or the code changed)")
        return {}


def engine_memory(home: Path) -> str:
    from warehouse.engine.client import running_engine
    from warehouse.engine.state import EngineFiles

    state = running_engine(EngineFiles(home))
    if state is None:
        return "no engine"
    parent = psutil.Process(state.pid)
    rss = {p.name(): p.memory_info().rss for p in [parent, *parent.children(recursive=True)]}
    return ", ".join(f"{name} {size / 2**20:,.0f} MiB" for name, size in rss.items() if size > 2**20) + \
        f" (resident; {sum(rss.values()) / 2**20:,.0f} MiB in all)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each contender after a warm-up (>= 3)")
    parser.add_argument("--impressions", type=int, default=100, help="impressions of the joined day (default 100)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as scratch:
        homes = {"engine": Path(scratch) / "engine", "own JVM": Path(scratch) / "classic"}
        for home in homes.values():
            subprocess.run([FEATUREHOUSE, "generate", "--home", str(home), "--days", "4", "--impressions-per-day",
                            str(args.impressions), "--start", DS.isoformat()], check=True, capture_output=True)  # fmt: skip
        try:
            subprocess.run([FEATUREHOUSE, "engine", "start", "--home", str(homes["engine"])], check=True,
                           capture_output=True)  # fmt: skip
            say(f"engine started; idle: {engine_memory(homes['engine'])}")
            flags = {"engine": [], "own JVM": ["--engine", "off"]}
            select = rounds({name: Command(home, "sql", "SELECT 1", *flags[name]) for name, home in homes.items()},
                            args.runs, label="SELECT 1, ")  # fmt: skip
            join = ["label-join", "--dataset", "ads", "--ds", DS.isoformat()]
            joins = rounds({name: Command(home, *join, *flags[name]) for name, home in homes.items()}, args.runs,
                           label=f"{args.impressions:,}-impression label join, ")  # fmt: skip
            say(f"engine after the runs: {engine_memory(homes['engine'])}")
        finally:
            subprocess.run([FEATUREHOUSE, "engine", "stop", "--home", str(homes["engine"])], check=False,
                           capture_output=True, env={**os.environ})  # fmt: skip
    for what, results in (("SELECT 1", select), (f"{args.impressions:,}-impression label join", joins)):
        for name, runs in results.items():
            say(f"{what}, {name}: {spread(figure(runs))} wall")
        share = ratio(results["engine"], results["own JVM"])
        say(f"{what}: engine / own JVM {share['median']:.2f}x (round by round, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
