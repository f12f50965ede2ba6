"""The ``main`` wrapper of the Spark jobs.

Each job module has ``parse_args(argv)``, a pure ``run(spark, config)`` and
``main(argv) -> int``; spark-submit, the CLI, Airflow and tests call the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from schemas.exit import run_command
from schemas.redact import secret_values
from warehouse.session import spark_session


class SparkJobConfig(Protocol):
    home: Path
    spark_conf: Mapping[str, str]
    engine: str | None
    engine_url: str | None

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
        with spark_session(config.home, conf=config.spark_conf, engine=config.engine, remote=config.engine_url) as spark:
            return run(spark, config).format()

    return run_command(body, secrets)
