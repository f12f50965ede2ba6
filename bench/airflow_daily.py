"""``featurehouse_daily`` under ``airflow dags test`` for one ds: its Spark task on the data folder's engine against
the same task by spark-submit (a JVM of its own), alternating, median of the runs after a warm-up.

    .venv/bin/python -m bench.airflow_daily --runs 5 --impressions 3000

Each contender has its own Airflow deployment (metadata database, ``airflow_dags.setup``) and its own data folder
with the same generated ds (its labels through ds + 3 days, closed), so the sensors pass at their first poke. The
spark-submit contender is the same operator told to use a metastore by a Variable (``featurehouse_spark_conf``
naming its folder's embedded Derby), which keeps a task off the engine: the path every task took before. Each run
replaces the ds's partition in one commit. The engine is started before the warm-up, as it would be running in a
day of work; the wall time is the whole ``airflow dags test`` command's, Airflow's own start included.

The engine issue's target: at most 25 s for the DAG of a 3,000-impression ds (71 s before).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import figure, ratio, rounds, say, spread

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DS = "2026-11-02"


class Deployment:
    """One Airflow home over one data folder; ``classic`` keeps the Spark task off the engine."""

    def __init__(self, root: Path, impressions: int, *, classic: bool) -> None:
        self.home = root / "data"
        subprocess.run([str(BIN / "featurehouse"), "generate", "--home", str(self.home), "--days", "1",
                        "--impressions-per-day", str(impressions), "--start", DS], check=True, capture_output=True)  # fmt: skip
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FEATUREHOUSE_"))}
        self.env = {
            **base,
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "airflow_dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_VAR_FEATUREHOUSE_HOME": str(self.home),
            "FEATUREHOUSE_SENSOR_POKE_S": "1",
        }  # fmt: skip
        if classic:
            from schemas.settings import METASTORE_URL
            from warehouse.confs import embedded_confs

            metastore = {METASTORE_URL: embedded_confs(self.home.resolve())[METASTORE_URL]}
            self.env["AIRFLOW_VAR_FEATUREHOUSE_SPARK_CONF"] = json.dumps(metastore)
        for step in (["-m", "airflow", "db", "migrate"], ["-m", "airflow_dags.setup"], ["-m", "airflow", "dags", "reserialize"]):
            done = subprocess.run([sys.executable, *step], cwd=REPO, env=self.env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(step)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")

    def __call__(self) -> dict:
        done = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "featurehouse_daily", DS], cwd=REPO,
                              env=self.env, capture_output=True, text=True)  # fmt: skip
        output = done.stdout + done.stderr
        if done.returncode != 0 or "featurehouse: featurehouse_daily." in output:
            raise SystemExit(f"airflow dags test featurehouse_daily {DS} failed:\n{output[-4000:]}")
        if "starting the engine for" in output:
            raise SystemExit("the engine was started inside a timed run (it stopped, or the code changed)")
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.airflow_daily", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each contender after a warm-up (>= 3)")
    parser.add_argument("--impressions", type=int, default=3000, help="impressions of the ds (default 3,000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-airflow-") as scratch:
        say("setting up two Airflow deployments and their data folders")
        contenders = {"engine": Deployment(Path(scratch) / "engine", args.impressions, classic=False),
                      "spark-submit": Deployment(Path(scratch) / "classic", args.impressions, classic=True)}  # fmt: skip
        engine_home = str(contenders["engine"].home)
        try:
            subprocess.run([str(BIN / "featurehouse"), "engine", "start", "--home", engine_home], check=True,
                           capture_output=True)  # fmt: skip
            results = rounds(contenders, args.runs, label=f"featurehouse_daily, {args.impressions:,} impressions, ")
        finally:
            subprocess.run([str(BIN / "featurehouse"), "engine", "stop", "--home", engine_home], check=False,
                           capture_output=True)  # fmt: skip
    for name, runs in results.items():
        say(f"airflow dags test featurehouse_daily ({args.impressions:,} impressions), {name}: {spread(figure(runs))} wall")
    share = ratio(results["engine"], results["spark-submit"])
    say(f"featurehouse_daily: engine / spark-submit {share['median']:.2f}x (round by round, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
