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
