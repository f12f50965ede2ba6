"""Spark settings: the embedded defaults, settings parsed from flags, and settings changed for a block."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@contextmanager
def runtime_confs(spark: SparkSession, confs: Mapping[str, str], *, keep_set: bool = False) -> Iterator[None]:
    """``confs`` set on the session while the block runs, each key's earlier value (or its absence) restored after.

    ``keep_set``: a key the session already sets (a user's ``--conf``) keeps its value.
    """
    previous = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        if not (keep_set and previous[key] is not None):
            spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


#: Spark SQL settings for a job whose input is below :data:`SMALL_INPUT_BYTES`: its plans run interpreted.
#: Compiling generated code (whole-stage code and each projection's class, with Janino) is a fixed cost of
#: every query, some 15% of a 100-impression label join's driver time by a JFR profile; it pays for itself only
#: on enough rows. The results are the same: the interpreted expressions are the ones the code is generated from.
#: Measured 2026-12-04 (3 runs in a started session, medians): a 100-impression day 8.2 s against 10.0 s compiled,
#: a 20,000-impression day (about 63 MB of landing JSON with the demo's registry) 21.0 s against 23.4 s; larger
#: inputs were not measured, so they keep compiled code.
INTERPRETED_CONFS = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
SMALL_INPUT_BYTES = 64 * 2**20


def input_size_confs(input_bytes: int) -> dict[str, str]:
    """The settings a job reading ``input_bytes`` runs under: :data:`INTERPRETED_CONFS` for a small input, else none."""
    return dict(INTERPRETED_CONFS) if input_bytes < SMALL_INPUT_BYTES else {}
