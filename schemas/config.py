"""What every job's config shares: the data folder, the registry folder, Spark settings, the dataset.

Each job's config is a frozen dataclass that extends one of these and is validated once, on
construction. Every field is keyword-only here, so a job's own fields read in any order. What can be
refused from the files alone (an unknown dataset, a missing landing partition) is refused by
``check_inputs``, which the command runs before it starts a JVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from schemas.names import validate_name
from schemas.registry import DatasetRegistry, load_dataset


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """A job that reads the warehouse under ``home`` with the feature registries of ``registry_dir``."""

    home: Path
    registry_dir: Path | None = None  # None: schemas/datasets in this repo


@dataclass(frozen=True, kw_only=True)
class SparkJobConfig(JobConfig):
    """A job that runs in a Spark session: ``spark_conf`` is applied over the profile and the embedded defaults."""

    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def check_inputs(self) -> None:
        """Refuse, before a Spark session starts, what the local files already show to be wrong (raises a
        FeaturehouseError naming the input and the fix). Nothing to check here; jobs add their own."""


@dataclass(frozen=True, kw_only=True)
class DatasetJobConfig(SparkJobConfig):
    """A Spark job on one dataset, whose name is checked before it reaches a path or a query."""

    dataset: str

    def __post_init__(self) -> None:
        validate_name("dataset", self.dataset)

    def registry(self) -> DatasetRegistry:
        """The dataset's registry (a RegistryError names the file that is missing or wrong)."""
        return load_dataset(self.dataset, self.registry_dir)

    def check_inputs(self) -> None:
        """The dataset has a registry, and it is valid."""
        self.registry()
