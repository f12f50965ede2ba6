"""Start-up cost: ``featurehouse sql "SELECT 1"`` wall time, a fresh process and JVM each run, with and without
the driver's class-data archive (``warehouse/cds.py``), alternating, median of the runs after a warm-up.

    .venv/bin/python -m bench.startup --runs 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import figure, ratio, rounds, say, spread
from warehouse import cds
from warehouse.confs import session_confs

FEATUREHOUSE = str(Path(sys.executable).parent / "featurehouse")


class SelectOne:
    """One ``featurehouse sql "SELECT 1"`` in its own process, on a data folder of its own."""

    def __init__(self, home: Path, *, archive: bool) -> None:
        self.home, self.archive = home, archive

    def __call__(self) -> dict:
        env = {**os.environ, cds.SWITCH: "on" if self.archive else "off"}
        done = subprocess.run([FEATUREHOUSE, "sql", "SELECT 1", "--home", str(self.home), "--conf",
                               "spark.ui.enabled=false"], env=env, capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"featurehouse sql failed:\n{done.stderr[-2000:]}")
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each contender after a warm-up (>= 3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        if cds.java_options(session_confs(Path(scratch) / "probe")) is None:  # the sessions below would map none
            raise SystemExit("no class-data archive for the embedded default: run `python -m warehouse.cds` "
                             "(make install does)")  # fmt: skip
        contenders = {"without the archive": SelectOne(Path(scratch) / "a", archive=False),
                      "with the archive": SelectOne(Path(scratch) / "b", archive=True)}  # fmt: skip
        results = rounds(contenders, args.runs, label="SELECT 1, ")
    for name, runs in results.items():
        say(f"{name}: {spread(figure(runs))}")
    share = ratio(results["with the archive"], results["without the archive"])
    say(f"with / without the archive: {share['median']:.2f}x (round by round, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
