"""What every job's config shares: the data folder, the registry folder, Spark settings, the dataset.

Each job's config is a frozen dataclass that extends one of these and is validated once, on
construction. Every field is keyword-only here, so a job's own fields read in any order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from schemas.names import validate_name


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """A job that reads the warehouse under ``home`` with the feature registries of ``registry_dir``."""

    home: Path
    registry_dir: Path | None = None  # None: schemas/datasets in this repo


@dataclass(frozen=True, kw_only=True)
class SparkJobConfig(JobConfig):
    """A job that runs in a Spark session: ``spark_conf`` is applied over the profile and the embedded defaults."""

    spark_conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DatasetJobConfig(SparkJobConfig):
    """A Spark job on one dataset, whose name is checked before it reaches a path or a query."""

    dataset: str

    def __post_init__(self) -> None:
        validate_name("dataset", self.dataset)
