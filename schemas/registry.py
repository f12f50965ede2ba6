"""The feature registry: one YAML file per dataset under ``schemas/datasets/``.

The registry is the single source of truth for what a column of a feature table
means. It is loaded once into frozen pydantic models that reject unknown keys;
every error names the file and the feature. Spark and Arrow schemas, the reader's
column list and the quality expectations are all derived from these objects.

A file looks like this (``schemas/datasets/ads.yaml``)::

    dataset: ads
    description: Ads ranking impressions joined with clicks and conversions.
    owner: ads-ranking
    retention: 365d                       # optional: partitions older than this are dropped
    labels:
      - {name: click, window: 1h}
      - {name: conversion, window: 3d}
    features:
      - name: user_ctr_7d
        kind: dense
        dtype: float32
        default: 0.0
        description: User click-through rate over the last 7 days.
        owner: ads-ranking
        lifecycle: {status: active, added_ds: 2026-11-01}
      - name: item_ctr_7d_log             # derived: computed from other columns, never logged
        kind: dense
        dtype: float32
        derived: log1p(item_ctr_7d)
        ...
      - name: user_age_years              # renamed: the table column user_age becomes user_age_years
        renamed_from: user_age
        ...

Lifecycle: ``active``; ``deprecated`` from ``deprecated_ds`` on (the column stays,
writes leave it null from that ds); ``dropped`` (the column is dropped from the
table; the entry stays so the catalog remembers it). A feature's kind and dtype
never change: add a new feature instead.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schemas.errors import InvalidNameError, RegistryError, explain_validation
from schemas.names import SafeName, validate_name
from schemas.quality import DatasetQuality, FeatureQuality

DEFAULT_REGISTRY_DIR = Path(__file__).resolve().parent / "datasets"

#: Columns every feature table has besides its labels and features, in table order.
KEY_COLUMNS: tuple[str, ...] = ("impression_id", "user_id", "item_id", "event_time")
PARTITION_COLUMN = "ds"
LABEL_PREFIX = "label_"


class Kind(StrEnum):
    DENSE = "dense"
    SPARSE = "sparse"
    WEIGHTED_SPARSE = "weighted_sparse"


class DType(StrEnum):
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    INT64 = "int64"


#: Which dtypes each kind allows: dense values are floats, sparse values are int64 ids.
ALLOWED_DTYPES: dict[Kind, tuple[DType, ...]] = {
    Kind.DENSE: (DType.FLOAT32, DType.FLOAT64),
    Kind.SPARSE: (DType.INT64,),
    Kind.WEIGHTED_SPARSE: (DType.INT64,),
}

_DURATION = re.compile(r"^(\d+)\s*([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> dt.timedelta:
    """Parse ``30s``, ``15m``, ``1h`` or ``3d`` into a timedelta.

    >>> parse_duration("3d")
    datetime.timedelta(days=3)
    """
    match = _DURATION.fullmatch(str(text).strip())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"window {text!r} is not a positive duration; write it like 30m, 1h or 3d")
    return dt.timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class Status(StrEnum):
    ACTIVE = "active"
    DEPRECATED = "deprecated"
    DROPPED = "dropped"


class Lifecycle(_Frozen):
    """Where a feature is in its life: added on a ds, maybe deprecated from a ds on, maybe dropped."""

    status: Status = Status.ACTIVE
    added_ds: dt.date | None = None
    deprecated_ds: dt.date | None = None

    @model_validator(mode="after")
    def _deprecation_has_date(self) -> Lifecycle:
        if self.status is Status.DEPRECATED and self.deprecated_ds is None:
            raise ValueError("a deprecated feature needs lifecycle.deprecated_ds (the first ds it is no longer filled)")
        if self.status is Status.ACTIVE and self.deprecated_ds is not None:
            raise ValueError("lifecycle.deprecated_ds is set but status is 'active'; set status: deprecated")
        if self.added_ds and self.deprecated_ds and self.deprecated_ds < self.added_ds:
            raise ValueError(
                f"lifecycle.deprecated_ds {self.deprecated_ds} is before added_ds {self.added_ds}; fix one of the dates"
            )
        return self


class Feature(_Frozen):
    """One registered feature: one top-level column of the feature table."""

    name: SafeName
    kind: Kind
    dtype: DType
    default: float | list[int] | None = None
    description: str = Field(min_length=1)
    owner: str = Field(min_length=1)
    lifecycle: Lifecycle = Lifecycle()
    #: The column's previous name: the table column is renamed (Delta column mapping, no file rewritten),
    #: and logs may still carry the feature under this name.
    renamed_from: SafeName | None = None
    #: A Spark SQL expression over the table's key and feature columns (never its labels): the feature is
    #: computed on write, not logged, and ``featurehouse backfill`` fills it into past partitions.
    derived: str | None = Field(default=None, min_length=1)
    #: What a published partition must satisfy for this feature (``schemas/quality.py``).
    quality: FeatureQuality = FeatureQuality()

    @field_validator("name", "renamed_from")
    @classmethod
    def _name_is_free(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if value in KEY_COLUMNS or value == PARTITION_COLUMN or value.startswith(LABEL_PREFIX):
            raise ValueError(
                f"name {value!r} collides with a table column ({', '.join(KEY_COLUMNS)}, ds, label_*); rename it"
            )
        return value

    @model_validator(mode="after")
    def _dtype_and_default_fit_kind(self) -> Feature:
        allowed = ALLOWED_DTYPES[self.kind]
        if self.dtype not in allowed:
            raise ValueError(
                f"dtype {self.dtype.value!r} is not allowed for kind {self.kind.value!r}; "
                f"use {' or '.join(d.value for d in allowed)}"
            )
        if self.kind is Kind.DENSE and not (self.default is None or isinstance(self.default, float | int)):
            raise ValueError(f"default {self.default!r} of a dense feature must be a number")
        if self.kind is not Kind.DENSE and not (self.default is None or isinstance(self.default, list)):
            raise ValueError(f"default {self.default!r} of a {self.kind.value} feature must be a list of ids, e.g. []")
        if self.renamed_from == self.name:
            raise ValueError(f"renamed_from {self.renamed_from!r} is the feature's own name; remove renamed_from")
        if self.quality.range is not None and self.kind is not Kind.DENSE:
            raise ValueError(f"quality.range is for dense features; {self.kind.value} features take quality.max_length")
        if self.quality.max_length is not None and self.kind is Kind.DENSE:
            raise ValueError("quality.max_length is for sparse features; dense features take quality.range")
        return self

    @property
    def status(self) -> Status:
        return self.lifecycle.status

    @property
    def stored(self) -> bool:
        """Whether the feature is a column of the table (every status but dropped)."""
        return self.lifecycle.status is not Status.DROPPED

    @property
    def log_keys(self) -> tuple[str, ...]:
        """The names under which impression logs may carry this feature (derived features: none)."""
        if self.derived is not None:
            return ()
        return (self.name,) if self.renamed_from is None else (self.name, self.renamed_from)

    def populated_on(self, ds: dt.date) -> bool:
        """Whether a write of ``ds`` fills this feature: stored and not deprecated by then."""
        deprecated = self.lifecycle.deprecated_ds
        return self.stored and (deprecated is None or ds < deprecated)

    @property
    def fill_value(self) -> float | list[int]:
        """What a reader puts where the column is null: the default, else 0.0 or []."""
        if self.default is not None:
            return self.default
        return 0.0 if self.kind is Kind.DENSE else []


class LabelSpec(_Frozen):
    """A label type and its attribution window (how long after an impression it counts)."""

    name: SafeName
    window: dt.timedelta
    description: str = ""

    @field_validator("window", mode="before")
    @classmethod
    def _parse_window(cls, value: Any) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        return parse_duration(value)

    @property
    def column(self) -> str:
        """The table column holding this label (0 or 1)."""
        return f"{LABEL_PREFIX}{self.name}"


class DatasetRegistry(_Frozen):
    """A dataset's registry file, validated: its labels and its features in column order."""

    dataset: SafeName
    description: str = ""
    owner: str = ""
    labels: tuple[LabelSpec, ...] = Field(min_length=1)
    features: tuple[Feature, ...] = Field(min_length=1)
    quality: DatasetQuality = DatasetQuality()
    #: How long partitions are kept: ``featurehouse retention`` drops those older than this, counted back
    #: from the day it runs. Whole days, at least one; None (no ``retention:`` key) keeps them forever.
    retention: dt.timedelta | None = None
    source: str = "<memory>"

    @field_validator("retention", mode="before")
    @classmethod
    def _parse_retention(cls, value: Any) -> dt.timedelta | None:
        if value is None or isinstance(value, dt.timedelta):
            return value
        try:
            retention = parse_duration(value)
        except ValueError:
            raise ValueError(f"retention {value!r} is not a duration; write it in days, e.g. 365d") from None
        if retention < dt.timedelta(days=1) or retention % dt.timedelta(days=1):
            raise ValueError(
                f"retention {value!r} is not a whole number of days (at least 1); partitions are dropped by "
                "whole days: write it in days, e.g. 365d"
            )
        return retention

    @cached_property
    def by_name(self) -> dict[str, Feature]:
        return {f.name: f for f in self.features}

    @property
    def stored_features(self) -> tuple[Feature, ...]:
        """The features that are columns of the table (not dropped), in registry order."""
        return tuple(f for f in self.features if f.stored)

    @property
    def logged_features(self) -> tuple[Feature, ...]:
        """Stored features read from the impression logs (not derived)."""
        return tuple(f for f in self.stored_features if f.derived is None)

    @property
    def derived_features(self) -> tuple[Feature, ...]:
        """Stored features computed from other columns, in registry order."""
        return tuple(f for f in self.stored_features if f.derived is not None)

    def known_log_keys(self, kind: Kind) -> tuple[str, ...]:
        """The names a log's map of ``kind`` may use for registered features, whatever their status
        (new and old names; derived features are never logged), sorted. Other names are unknown."""
        return tuple(sorted({key for f in self.features if f.kind is kind for key in f.log_keys}))

    def of_kind(self, kind: Kind) -> tuple[Feature, ...]:
        return tuple(f for f in self.stored_features if f.kind is kind)

    @property
    def label_columns(self) -> tuple[str, ...]:
        return tuple(label.column for label in self.labels)

    @property
    def max_window(self) -> dt.timedelta:
        return max(label.window for label in self.labels)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column of the feature table, in order, the partition column last."""
        return (*KEY_COLUMNS, *self.label_columns, *(f.name for f in self.stored_features), PARTITION_COLUMN)


def _parse_feature(raw: Any, *, index: int, source: str) -> Feature:
    name = raw.get("name") if isinstance(raw, dict) else None
    where = f"{source}: feature {name!r}" if name else f"{source}: features[{index}]"
    if not isinstance(raw, dict):
        raise RegistryError(f"{where} is {type(raw).__name__}, not a mapping of name, kind, dtype, ...")
    try:
        return Feature.model_validate(raw)
    except ValidationError as err:
        raise RegistryError(explain_validation(err, where=where, in_words=True)) from err


def parse_registry(raw: Any, *, source: str, expected_dataset: str | None = None) -> DatasetRegistry:
    """Validate a registry already loaded from YAML. ``source`` names it in errors."""
    if not isinstance(raw, dict):
        raise RegistryError(f"{source}: the file must be a mapping with keys dataset, labels, features")
    raw = dict(raw)
    raw_features = raw.pop("features", None)
    if not isinstance(raw_features, list) or not raw_features:
        raise RegistryError(f"{source}: 'features' must be a non-empty list of feature definitions")
    features = tuple(_parse_feature(item, index=i, source=source) for i, item in enumerate(raw_features))
    seen: set[str] = set()
    for feature in features:
        if feature.name in seen:
            raise RegistryError(f"{source}: feature {feature.name!r} is defined twice; names must be unique")
        seen.add(feature.name)
    renamed: set[str] = set()
    for feature in features:
        old = feature.renamed_from
        if old is None:
            continue
        if old in seen:
            raise RegistryError(
                f"{source}: feature {feature.name!r} is renamed_from {old!r}, but {old!r} is still a feature of "
                "its own; a renamed column has one name: remove one of them"
            )
        if old in renamed:
            raise RegistryError(f"{source}: two features are renamed_from {old!r}; a column can be renamed once")
        renamed.add(old)
    try:
        registry = DatasetRegistry.model_validate({**raw, "features": features, "source": source})
    except ValidationError as err:
        raise RegistryError(explain_validation(err, where=source, in_words=True)) from err
    if expected_dataset is not None and registry.dataset != expected_dataset:
        raise RegistryError(
            f"{source}: declares dataset {registry.dataset!r} but the file is named for {expected_dataset!r}; "
            "make the file name and the 'dataset' key agree"
        )
    label_names = [label.name for label in registry.labels]
    if len(set(label_names)) != len(label_names):
        raise RegistryError(f"{source}: label types {label_names} repeat a name; each label type appears once")
    return registry


def load_registry(path: str | Path) -> DatasetRegistry:
    """Load and validate one registry file.

    >>> load_registry(DEFAULT_REGISTRY_DIR / "ads.yaml").dataset
    'ads'
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise RegistryError(f"registry file {path} does not exist; create it or pick another --dataset") from err
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise RegistryError(f"{path}: not valid YAML: {err}") from err
    return parse_registry(raw, source=str(path), expected_dataset=path.stem)


def load_dataset(dataset: str, registry_dir: str | Path | None = None) -> DatasetRegistry:
    """Load the registry of ``dataset`` from ``registry_dir`` (default: ``schemas/datasets``)."""
    try:
        validate_name("dataset", dataset)
    except InvalidNameError as err:
        raise RegistryError(str(err)) from err
    directory = Path(registry_dir) if registry_dir else DEFAULT_REGISTRY_DIR
    path = directory / f"{dataset}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in directory.glob("*.yaml"))
        raise RegistryError(
            f"no registry for dataset {dataset!r}: {path} does not exist; known datasets: {', '.join(known) or 'none'}"
        )
    return load_registry(path)


def registry_datasets(registry_dir: Path | None) -> tuple[str, ...]:
    """The datasets that have a registry file in ``registry_dir``."""
    directory = Path(registry_dir) if registry_dir else DEFAULT_REGISTRY_DIR
    names = tuple(sorted(p.stem for p in directory.glob("*.yaml")))
    if not names:
        raise RegistryError(f"no registry files (*.yaml) in {directory}; pass --registry-dir")
    return names
