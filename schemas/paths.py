"""Where data lives on the embedded default: one folder, shared by the JVM jobs and the JVM-free reader.

One rule for every process, the CLI's, spark-submit's and an Airflow worker's alike (whose
working directory is arbitrary): the data folder is ``$FEATUREHOUSE_HOME`` if set, else the
``data`` folder of this checkout (``<repo>/data``), wherever the command runs from. Its
warehouse and landing zone are :func:`warehouse_location` and :func:`landing_location`.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_VARIABLE = "FEATUREHOUSE_HOME"
#: The checkout featurehouse runs from (the folder holding schemas/, etl/, ...).
REPO_ROOT = Path(__file__).resolve().parent.parent


def default_home() -> Path:
    """The data folder: ``$FEATUREHOUSE_HOME`` if set, else ``<repo>/data``; always absolute."""
    return Path(os.environ.get(HOME_VARIABLE) or REPO_ROOT / "data").resolve()


def warehouse_location(home: Path | str) -> str:
    """The warehouse root of the data folder ``home`` (``spark.sql.warehouse.dir`` of the embedded default).

    A string, not a ``Path``, because the reader, DPP and the trainer take it as Spark does: a
    location that may also be a URI.
    """
    return str(Path(home).resolve() / "warehouse")


def landing_location(home: Path | str) -> str:
    """The landing zone root of the data folder ``home``, where ``--landing`` is not given."""
    return str(Path(home).resolve() / "landing")


def local_path(location: str) -> Path | None:
    """The local folder or file a location names (a plain path or a ``file:`` URI), or None for any other URI
    (``s3a://``, ``hdfs://``): what can be checked without Hadoop's FileSystem, hence without a JVM."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").removeprefix("//"))
    return None if "://" in location else Path(location)
