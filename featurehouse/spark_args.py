"""``featurehouse spark-args``: the arguments that point stock Spark tools at this warehouse.
Secret confs given to it (a metastore ConnectionPassword, say) are printed as they are: its output is a
command line to pass on, not a log.

    .venv/bin/spark-sql $(featurehouse spark-args) -e "SHOW TABLES IN featurehouse"

Prints ``--master``, ``--jars``, ``--driver-java-options`` and ``--conf k=v`` for
the embedded default (the same settings every featurehouse job uses), separated
by spaces, ready for ``$(...)``; a path with whitespace in it is refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from schemas.errors import ConfigError
from schemas.exit import run_command
from schemas.redact import redact, secret_values
from warehouse.confs import spark_submit_args
from warehouse.flags import add_common_arguments, common_settings


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="featurehouse spark-args", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    add_common_arguments(parser)
    return parser.parse_args(argv)


def arguments(argv: Sequence[str] | None = None) -> str:
    """The arguments, space-separated; a path with whitespace is a ConfigError."""
    settings = common_settings(parse_args(argv))
    args = spark_submit_args(settings["home"], settings["spark_conf"])
    spaced = [a for a in args if any(ch.isspace() for ch in a)]
    if spaced:
        shown = redact(repr(spaced[0]), secret_values(settings["spark_conf"]))  # an error is a log line
        raise ConfigError(f"{shown} contains whitespace and cannot pass through $(...); use a --home without spaces")
    return " ".join(args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: arguments(argv))
