"""A training job's spec: what it reads (dataset, partitions, features, labels) and how it batches.

One YAML file per job, validated once against the dataset's registry::

    job_id: ctr-model-v3
    dataset: ads
    ds: {from: 2026-11-01, to: 2026-11-07}      # or a list: [2026-11-01, 2026-11-03]
    features:
      - name: user_ctr_7d
        transforms: [{fill: 0.0}, {clamp: [0, 1]}, log1p]
      - name: item_topic_ids
        transforms: [{hash: 100000}, {truncate: 20}]
    labels: [click]
    batch_size: 4096
    shuffle_buffer: 65536
    seed: 7
    drop_last: true
    read_gap: 1048576       # bytes: a row group's chosen columns within this gap are fetched in one request
                            # (Meta's 1 MiB; the default); null: one request per column chunk
    # for `featurehouse train` (trainer/): ds above is what it trains on
    model: {embedding_dim: 16, bottom_mlp: [64, 32], top_mlp: [64, 32]}
    train: {eval_ds: {from: 2026-11-08, to: 2026-11-08}, epochs: 3, learning_rate: 0.05}

A feature that is not in the registry, or is deprecated or dropped, is refused with
its name and the registry's closest names. A sparse feature's embedding table has
the rows of its ``hash`` transform, or ``embedding_rows: N`` next to its name.
"""

from __future__ import annotations

import datetime as dt
import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ingest.transforms import parse_transforms
from schemas.errors import ConfigError, RegistryError, explain_validation
from schemas.names import JOB_ID_RULE, SafeName, valid_job_id
from schemas.registry import DatasetRegistry, Feature, Status, load_dataset


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DsRange(_Frozen):
    start: dt.date = Field(alias="from")
    end: dt.date = Field(alias="to")

    @model_validator(mode="after")
    def _ordered(self) -> DsRange:
        if self.end < self.start:
            raise ValueError(f"ds range to {self.end} is before from {self.start}; give it in order")
        return self

    def days(self) -> tuple[dt.date, ...]:
        return tuple(self.start + dt.timedelta(days=i) for i in range((self.end - self.start).days + 1))


class FeatureSpec(_Frozen):
    """A feature the job reads, with its transforms in order (see ``ingest/transforms.py``)."""

    name: SafeName
    transforms: tuple[Any, ...] = ()
    embedding_rows: int | None = Field(default=None, gt=0)  # a sparse feature's table size, if not its hash's
    pooling: Literal["sum", "mean"] | None = None  # a sparse feature's pooling, if not the model's


_LayerSize = Annotated[int, Field(gt=0)]  # a refused size reads "model.top_mlp.1: Input should be greater than 0"


class ModelSpec(_Frozen):
    """DLRM's sizes and shape: the bottom MLP's hidden layers (it ends in ``embedding_dim``), the top MLP's hidden
    layers (at least one; it ends in one logit per label), how each table pools its ids (a feature's own
    ``pooling`` overrides it) and how the embeddings meet: ``dot`` (DLRM's pairwise dot products) or ``dcn``
    (DLRM_DCN's low-rank cross network of ``dcn_layers`` layers of rank ``dcn_low_rank``).

    One ``embedding_dim`` for every table: both interactions take dot products or cross terms across tables,
    and TorchRec's ``DLRM`` refuses tables of different dimensions.
    """

    embedding_dim: int = Field(default=16, gt=0)
    bottom_mlp: tuple[_LayerSize, ...] = (64, 32)
    top_mlp: tuple[_LayerSize, ...] = Field(default=(64, 32), min_length=1)
    pooling: Literal["sum", "mean"] = "sum"
    interaction: Literal["dot", "dcn"] = "dot"
    dcn_layers: int | None = Field(default=None, gt=0)  # with interaction: dcn; default 3
    dcn_low_rank: int | None = Field(default=None, gt=0)  # with interaction: dcn; default 64

    @model_validator(mode="after")
    def _dcn_fields(self) -> ModelSpec:
        given = [name for name in ("dcn_layers", "dcn_low_rank") if getattr(self, name) is not None]
        if given and self.interaction != "dcn":
            raise ValueError(f"{' and '.join(given)} apply to interaction: dcn only; add interaction: dcn or drop them")
        return self


class TrainSpec(_Frozen):
    """How ``featurehouse train`` trains on the job's ``ds`` and evaluates on ``eval_ds``."""

    eval_ds: DsRange | tuple[dt.date, ...]
    epochs: int = Field(default=1, gt=0)
    learning_rate: float = Field(default=0.05, gt=0)
    optimizer: Literal["adagrad", "adam", "sgd"] = "adagrad"
    checkpoint_every: int = Field(default=0, ge=0)  # steps between checkpoints; 0: at each epoch's end only

    @property
    def eval_days(self) -> tuple[dt.date, ...]:
        return self.eval_ds.days() if isinstance(self.eval_ds, DsRange) else tuple(sorted(self.eval_ds))


class JobSpec(_Frozen):
    job_id: str
    dataset: str
    ds: DsRange | tuple[dt.date, ...]
    features: tuple[FeatureSpec, ...] = Field(min_length=1)
    labels: tuple[str, ...] = Field(min_length=1)
    batch_size: int = Field(default=4096, gt=0)
    shuffle_buffer: int = Field(default=0, ge=0)
    seed: int = 0
    drop_last: bool = False
    read_gap: int | None = Field(default=1 << 20, ge=0)  # ingest.projected_reads.Coalescing
    model: ModelSpec | None = None
    train: TrainSpec | None = None
    source: str = "<memory>"

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        if not valid_job_id(value):
            raise ValueError(f"job_id {value!r} is not allowed; use {JOB_ID_RULE}")
        return value

    @field_validator("ds")
    @classmethod
    def _ds_list(cls, value: DsRange | tuple[dt.date, ...]) -> DsRange | tuple[dt.date, ...]:
        if isinstance(value, tuple):
            if not value:
                raise ValueError("ds is an empty list; name at least one partition, or give {from: ..., to: ...}")
            if len(set(value)) != len(value):
                raise ValueError("ds lists a partition twice; list each once")
            return tuple(sorted(value))
        return value

    @model_validator(mode="after")
    def _no_leak(self) -> JobSpec:
        if self.train is not None and set(self.train.eval_days) & set(self.days):
            both = ", ".join(str(d) for d in sorted(set(self.train.eval_days) & set(self.days)))
            raise ValueError(f"train.eval_ds and ds share {both}; evaluate on partitions the job does not train on")
        return self

    @property
    def days(self) -> tuple[dt.date, ...]:
        return self.ds.days() if isinstance(self.ds, DsRange) else self.ds

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)


def _closest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    return f"closest registry names: {', '.join(close)}" if close else "no registry name is close"


def check_against_registry(spec: JobSpec, registry: DatasetRegistry) -> tuple[Feature, ...]:
    """The registry's features of the spec, in spec order; refuse unknown, deprecated and dropped ones."""
    names = [f.name for f in registry.features]
    seen: set[str] = set()
    features = []
    for wanted in spec.feature_names:
        if wanted in seen:
            raise ConfigError(f"{spec.source}: feature {wanted!r} is listed twice; list each feature once")
        seen.add(wanted)
        feature = registry.by_name.get(wanted)
        renamed = next((f for f in registry.features if f.renamed_from == wanted), None)
        if feature is None and renamed is not None:
            raise ConfigError(
                f"{spec.source}: feature {wanted!r} was renamed to {renamed.name!r} in {registry.source}; "
                f"use {renamed.name!r}"
            )
        if feature is None:
            raise ConfigError(
                f"{spec.source}: feature {wanted!r} is not in dataset {registry.dataset!r} ({registry.source}); "
                f"{_closest(wanted, names)}"
            )
        if feature.status is not Status.ACTIVE:
            since = f" from {feature.lifecycle.deprecated_ds}" if feature.lifecycle.deprecated_ds else ""
            active = [f.name for f in registry.features if f.status is Status.ACTIVE]
            raise ConfigError(
                f"{spec.source}: feature {wanted!r} is {feature.status.value}{since} in {registry.source}; "
                f"remove it from the job or pick an active feature ({_closest(wanted, active)})"
            )
        features.append(feature)
    for wanted, feature in zip(spec.features, features, strict=True):
        parse_transforms(feature, wanted.transforms, source=spec.source)  # refuse a bad transform now
    known_labels = [label.name for label in registry.labels]
    for label in spec.labels:
        if label not in known_labels:
            raise ConfigError(
                f"{spec.source}: label {label!r} is not a label type of {registry.dataset!r}; "
                f"use one of {', '.join(known_labels)}"
            )
    return tuple(features)


def parse_spec(raw: Any, *, source: str) -> JobSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a job spec is a mapping with keys job_id, dataset, ds, features, labels, ...")
    try:
        return JobSpec.model_validate({**raw, "source": source})
    except ValidationError as err:
        raise ConfigError(f"{source}: {explain_validation(err)}") from err


def load_spec(path: str | Path, *, registry_dir: str | Path | None = None) -> tuple[JobSpec, DatasetRegistry]:
    """Load a job spec file and check it against its dataset's registry."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ConfigError(f"job spec {path} does not exist; pass the path of a job YAML file") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    spec = parse_spec(raw, source=str(path))
    try:
        registry = load_dataset(spec.dataset, registry_dir)
    except RegistryError as err:
        raise ConfigError(f"{path}: {err}") from err
    check_against_registry(spec, registry)
    return spec, registry
