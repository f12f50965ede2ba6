"""What every job shares: common flags, progress lines, and the ``main`` wrapper.

Each job module has ``parse_args(argv)``, a pure ``run(spark, config)`` and
``main(argv) -> int``; spark-submit, the CLI, Airflow and tests call the same code.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from schemas.errors import run_command
from schemas.redact import redact, secret_values
from warehouse.profiles import chosen_profile
from warehouse.session import default_home, parse_conf_pairs, spark_session

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """Print one progress line to stderr, stamped with the wall clock; secrets in it are redacted."""
    print(f"[{time.strftime('%H:%M:%S')}] {redact(message)}", file=sys.stderr, flush=True)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--home``, ``--registry-dir``, ``--profile`` and repeatable ``--conf k=v``, shared by every job."""
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="data folder holding landing/, warehouse/ and metastore_db/ (default: $FEATUREHOUSE_HOME, else this checkout's data/)",
    )
    parser.add_argument(
        "--registry-dir",
        type=Path,
        default=None,
        help="folder of feature registry files <dataset>.yaml (default: schemas/datasets in this repo)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="NAME",
        help="a settings file choosing master, metastore and warehouse: local (the embedded default), cluster "
        "(profiles/cluster.yaml), or a path to a .yaml file (default: $FEATUREHOUSE_PROFILE, else local)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, repeatable; overrides the profile and the embedded defaults (e.g. --conf spark.master=yarn)",
    )


def common_settings(ns: argparse.Namespace) -> dict[str, Any]:
    """The shared settings of a parsed namespace, ready to pass to a config dataclass.

    ``spark_conf`` is the profile's settings with every ``--conf`` over them: a config carries
    all its settings, so a process it starts (the stream's publish step) gets the same ones.
    """
    home = (ns.home or default_home()).resolve()
    profile = chosen_profile(ns.profile)
    return {
        "home": home,
        "registry_dir": ns.registry_dir,
        "spark_conf": {**(profile.settings(home) if profile else {}), **parse_conf_pairs(ns.conf)},
    }


class SparkJobConfig(Protocol):
    home: Path
    spark_conf: Mapping[str, str]

    def check_inputs(self) -> None: ...


class Summary(Protocol):
    def format(self) -> str: ...


C = TypeVar("C", bound=SparkJobConfig)


def run_spark_job(parse: Callable[[], C], run: Callable[[Any, C], Summary]) -> int:
    """Parse, check the inputs, open a session, run, print the summary; a FeaturehouseError becomes one line and
    exit 2. What the config's ``check_inputs`` refuses is refused before any JVM starts.

    The values of secret ``--conf`` keys are masked in that line, even where they appear bare.
    """
    secrets: list[str] = []  # filled once parsed; run_command reads it only to print an error

    def body() -> str:
        config = parse()
        secrets.extend(secret_values(config.spark_conf))
        config.check_inputs()
        with spark_session(config.home, conf=config.spark_conf) as spark:
            return run(spark, config).format()

    return run_command(body, secrets)


@contextmanager
def counting_jobs(spark: Any, what: str) -> Iterator[Callable[[], int]]:
    """Count the Spark jobs launched by this thread inside the block: yields a function returning the count.

    The block runs in a Spark job group of its own (named after ``what``, shown in Spark's UI);
    the thread's previous group is restored on exit.
    """
    sc = spark.sparkContext
    previous = {key: sc.getLocalProperty(key) for key in ("spark.jobGroup.id", "spark.job.description")}
    group = f"featurehouse-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, what)
    try:
        yield lambda: len(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        for key, value in previous.items():
            sc.setLocalProperty(key, value)
