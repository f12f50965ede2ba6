"""What every job's config shares: the data folder, the registry folder, Spark settings, the dataset.

Each job's config is a frozen dataclass that extends one of these and is validated once, on
construction. Every field is keyword-only here, so a job's own fields read in any order. What can be
refused from the files alone (an unknown dataset, a missing landing partition) is refused by
``check_inputs``, which the command runs before it starts a JVM. A number's allowed range is a pydantic
constrained type (:data:`POSITIVE_INT` and its kin), tested with :func:`satisfies`; each config words its
own message, since the fix it names differs (``--limit``: "pass --all"; ``--rate``: "leave it out").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, Strict, TypeAdapter, ValidationError

from schemas.errors import ConfigError
from schemas.names import validate_name
from schemas.paths import landing_location
from schemas.registry import DatasetRegistry, load_dataset

#: A whole number of at least 1 (a bool is not one, nor is 2.0 or "2").
POSITIVE_INT = TypeAdapter(Annotated[int, Strict(), Field(ge=1)])
#: A whole number of at least 0.
NON_NEGATIVE_INT = TypeAdapter(Annotated[int, Strict(), Field(ge=0)])
#: A finite number above 0 (an int is one; a bool is not).
POSITIVE_NUMBER = TypeAdapter(Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)])
#: A number of seconds above 0; infinity is allowed (never, e.g. a report only at the end).
POSITIVE_SECONDS = TypeAdapter(Annotated[float, Strict(), Field(gt=0)])
#: A share between 0 and 0.5, both allowed (the generator's duplicate and orphan rates).
HALF_FRACTION = TypeAdapter(Annotated[float, Strict(), Field(ge=0, le=0.5)])


def satisfies(value: Any, rule: TypeAdapter, *, optional: bool = False) -> bool:
    """Whether ``value`` is allowed by ``rule`` (one of the constrained types above); ``optional``: None is too."""
    if optional and value is None:
        return True
    try:
        rule.validate_python(value)
    except ValidationError:
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """A job that reads the warehouse under ``home`` with the feature registries of ``registry_dir``."""

    home: Path
    registry_dir: Path | None = None  # None: schemas/datasets in this repo


@dataclass(frozen=True, kw_only=True)
class ReaderJobConfig(JobConfig):
    """A command of the reader's, without a JVM (read, dpp, train): ``profile`` names the warehouse it reads, a folder
    or an S3 bucket (schemas.storage.reader_store); None: ``$FEATUREHOUSE_PROFILE``, else ``<home>/warehouse``."""

    profile: str | None = None


@dataclass(frozen=True, kw_only=True)
class SparkJobConfig(JobConfig):
    """A job that runs in a Spark session: ``spark_conf`` is applied over the profile and the embedded defaults."""

    spark_conf: Mapping[str, str] = field(default_factory=dict)
    #: ``auto``: on the embedded default, a client of the home's engine (``--engine``, warehouse.flags); ``off``: the
    #: user chose a classic session in this process; None: a command that is not an engine client (classic too).
    engine: str | None = None
    #: A profile's remote engine, ``sc://host:port``: the command is its client (warehouse.session).
    engine_url: str | None = None

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


@dataclass(frozen=True, kw_only=True)
class LandingDaysConfig:
    """``days`` consecutive days of the landing zone under ``home`` from ``start``, of one dataset: what the
    generator writes (``featurehouse generate``) and the producer sends to Kafka (``featurehouse produce``)."""

    home: Path
    dataset: str
    start: dt.date
    days: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home))
        validate_name("dataset", self.dataset)
        if not satisfies(self.days, POSITIVE_INT):
            raise ConfigError(f"--days must be a positive whole number, got {self.days!r}")

    @property
    def landing(self) -> Path:
        return Path(landing_location(self.home))

    @property
    def dates(self) -> list[dt.date]:
        """The days, in order."""
        return [self.start + dt.timedelta(days=i) for i in range(self.days)]
