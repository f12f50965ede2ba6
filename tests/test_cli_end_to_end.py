"""The commands as a user runs them, each in its own process, on one fresh data folder:
``featurehouse generate``, the label join by spark-submit (a JVM of its own) and by the CLI (on the
home's engine, which it starts), ``featurehouse sql`` and ``features apply`` (on the same engine), the
catalog stats job by spark-submit (a JVM of its own, after stopping the idle engine), and the stock
``spark-sql`` shell with ``featurehouse spark-args``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
QUIET = ["--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]


def sh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{args[:3]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_generate_join_and_query_from_the_command_line(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "FEATUREHOUSE_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    featurehouse = str(BIN / "featurehouse")
    sh(featurehouse, "generate", "--days", "2", "--impressions-per-day", "400", "--start", "2026-11-01", env=env)

    spark_args = sh(featurehouse, "spark-args", *QUIET, env=env).stdout.split()
    submitted = sh(str(BIN / "spark-submit"), *spark_args, "etl/label_join.py", "--dataset", "ads",
                   "--ds", "2026-11-01", env=env)
    assert "label join ads ds=2026-11-01 -> featurehouse.ads (Delta version 1)" in submitted.stdout

    # on the home's engine, which it starts (a static setting such as spark.ui.enabled is the engine's, not a job's)
    joined = sh(featurehouse, "label-join", "--dataset", "ads", "--ds", "2026-11-02", "--conf",
                "spark.sql.shuffle.partitions=2", env=env)
    assert "label join ads ds=2026-11-02 -> featurehouse.ads (Delta version 2)" in joined.stdout
    assert "starting the engine for" in joined.stderr

    query = "SELECT ds, count(*) AS n, count(DISTINCT impression_id) AS ids FROM featurehouse.ads GROUP BY ds ORDER BY ds"
    answer = sh(featurehouse, "sql", "--format", "json", query, "--conf", "spark.sql.shuffle.partitions=2", env=env)
    assert answer.stderr == ""  # the engine the label join started
    rows = json.loads(answer.stdout)
    assert [r["ds"] for r in rows] == ["2026-11-01", "2026-11-02"]
    assert all(r["n"] == r["ids"] for r in rows)
    # each ds holds one row per distinct impression id logged that day (the generator writes no bad records; its
    # at-least-once copies collapse): 400 a day, as generated
    landing, logged = home / "landing" / "impressions", {}
    for part in landing.glob("ds=*/**/*.jsonl"):
        ids = logged.setdefault(part.relative_to(landing).parts[0].removeprefix("ds="), [])
        ids.extend(json.loads(line)["impression_id"] for line in part.open() if line.strip())
    assert rows == [{"ds": ds, "n": len(set(ids)), "ids": len(set(ids))} for ds, ids in sorted(logged.items())]
    assert [r["n"] for r in rows] == [400, 400] and sum(map(len, logged.values())) > 800  # duplicates were dropped

    applied = sh(featurehouse, "features", "apply", "--dataset", "ads", "--conf", "spark.sql.shuffle.partitions=2",
                 env=env)  # fmt: skip
    assert applied.stderr == ""  # on the same engine
    assert "features apply ads:" in applied.stdout and "catalog sync ads: 91 added" in applied.stdout
    stats = sh(str(BIN / "spark-submit"), *spark_args, "etl/maintenance/catalog.py", "stats", "--dataset", "ads",
               "--ds", "2026-11-01", env=env)  # fmt: skip
    # spark-submit: a Spark session of its own (spark-submit passes its Python's stderr on to stdout)
    assert "stopping the idle engine for" in stats.stdout
    assert f"stats ads ds=2026-11-01 (table featurehouse.ads version 2): {rows[0]['n']:,} rows in" in stats.stdout

    # 2026-11-02's statistics are the label join's own; 2026-11-01's were recomputed by the stats job
    shell = sh(str(BIN / "spark-sql"), *spark_args, "-e",
               "SELECT (SELECT count(*) FROM featurehouse.ads), (SELECT count(*) FROM featurehouse_catalog.feature_stats "
               "WHERE ds = '2026-11-01' AND table_version = 2), (SELECT count(*) FROM featurehouse_catalog.feature_stats "
               "WHERE ds = '2026-11-02' AND table_version = 2)", env=env)  # fmt: skip
    assert shell.stdout.split()[-3:] == [str(sum(r["n"] for r in rows)), "91", "91"]

    bad = subprocess.run([featurehouse, "label-join", "--dataset", "ads", "--ds", "2026-12-01", *QUIET],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith(
        f"error: impression partition {home}/landing/impressions/ds=2026-12-01 does not exist")
