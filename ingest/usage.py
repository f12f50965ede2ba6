"""Record what a training job read into ``featurehouse_catalog.feature_usage``, without a JVM.

The reader runs on trainer hosts that have no Spark, so it appends with the
``deltalake`` package straight to the Delta table Spark created (``featurehouse
catalog sync`` creates it). Spark SQL then sees the rows at once::

    from ingest.usage import UsageRecord, record_usage
    from schemas.catalog import FEATURE_USAGE, catalog_table_uri

    uri = catalog_table_uri("data/warehouse", FEATURE_USAGE)
    record_usage(uri, [UsageRecord(job_id="ctr-v3", dataset="ads", ds_from="2026-11-01", ds_to="2026-11-07",
                                   features=["user_ctr_7d", "item_topic_ids"], bytes_read=12_345_678,
                                   rows_read=140_000, table_version=12, started_at=t0, ended_at=t1)])
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from ingest.projected_reads import IoCounter
from schemas.catalog import FEATURE_USAGE_SCHEMA
from schemas.errors import ConfigError, TableError
from schemas.storage import Store
from schemas.names import JOB_ID_RULE, format_ds, parse_ds, valid_job_id, validate_name


@dataclass(frozen=True)
class UsageRecord:
    """One run of a training job: what it read, from which table version, and when."""

    job_id: str
    dataset: str
    ds_from: str
    ds_to: str
    features: Sequence[str]
    bytes_read: int
    rows_read: int
    table_version: int
    started_at: dt.datetime
    ended_at: dt.datetime
    cost: IoCounter | None = None  # batches, bytes all columns would cost, where time went; None: not measured
    compute_s: float | None = None  # a training run's: time computing, its samples/s and stall fraction
    samples_per_s: float | None = None
    stall_fraction: float | None = None
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        if not valid_job_id(self.job_id):
            raise ConfigError(f"job id {self.job_id!r} is not allowed; use {JOB_ID_RULE}")
        validate_name("dataset", self.dataset)
        if not self.features:
            raise ConfigError(f"usage of job {self.job_id!r} lists no features; record the features it read")
        for name in self.features:
            validate_name("feature", name)
        start, end = parse_ds(self.ds_from, what="ds_from"), parse_ds(self.ds_to, what="ds_to")
        if end < start:
            raise ConfigError(f"ds_to {self.ds_to} is before ds_from {self.ds_from}; give the range in order")
        for what in ("bytes_read", "rows_read", "table_version"):
            if getattr(self, what) < 0:
                raise ConfigError(f"{what} of job {self.job_id!r} is {getattr(self, what)}; it cannot be negative")
        for what in ("started_at", "ended_at"):
            if getattr(self, what).tzinfo is None:
                raise ConfigError(f"{what} of job {self.job_id!r} has no time zone; pass an aware datetime (UTC)")
        if self.ended_at < self.started_at:
            raise ConfigError(f"job {self.job_id!r} ended ({self.ended_at}) before it started ({self.started_at})")
        object.__setattr__(self, "ds_from", format_ds(start))
        object.__setattr__(self, "ds_to", format_ds(end))
        object.__setattr__(self, "features", tuple(self.features))

    def row(self) -> dict:
        return {
            "run_id": self.run_id,
            "job_id": self.job_id,
            "dataset": self.dataset,
            "ds_from": self.ds_from,
            "ds_to": self.ds_to,
            "features": list(self.features),
            "bytes_read": self.bytes_read,
            "rows_read": self.rows_read,
            "table_version": self.table_version,
            "started_at": self.started_at.astimezone(dt.UTC),
            "ended_at": self.ended_at.astimezone(dt.UTC),
            **_cost_columns(self.cost),
            "compute_s": self.compute_s,
            "samples_per_s": self.samples_per_s,
            "stall_fraction": self.stall_fraction,
        }


def _cost_columns(cost: IoCounter | None) -> dict:
    if cost is None:
        return {}
    return {
        "batches": cost.batches, "bytes_all_columns": cost.bytes_all_columns, "io_s": cost.io_s,
        "decode_s": cost.decode_s, "transform_s": cost.convert_s, "batching_s": cost.shuffle_s + cost.assemble_s, "wait_s": cost.wait_s,
    }  # fmt: skip


def record_usage(table_uri: str, records: Sequence[UsageRecord], *, store: Store | None = None) -> int:
    """Append ``records`` to the usage table at ``table_uri`` in one Delta commit; return its version.

    On S3 (``store``), deltalake commits with conditional writes: concurrent appends each get a version of
    their own, none is lost (docs/object-storage.md)."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    if not records:
        raise ConfigError("no usage records to write")
    options = None if store is None else store.delta_options()
    try:
        DeltaTable(table_uri, storage_options=options)
    except TableNotFoundError as err:
        raise TableError(
            f"no feature_usage table at {table_uri}; create the catalog first (featurehouse catalog sync)"
        ) from err
    batch = pa.Table.from_pylist([r.row() for r in records], schema=FEATURE_USAGE_SCHEMA)
    write_deltalake(table_uri, batch, mode="append", schema_mode="merge", storage_options=options)  # a catalog made before the cost columns gains them
    return DeltaTable(table_uri, storage_options=options).version()
