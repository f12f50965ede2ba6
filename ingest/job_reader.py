"""From a job spec to torch batches: snapshot, projected reads, transforms, Batch; no JVM anywhere.

    spec, registry = load_spec("jobs/ctr.yaml")
    reader = open_reader(spec, registry, warehouse="data/warehouse", rank=rank, world_size=world_size)
    for batch in ResumableLoader(reader.dataset, num_workers=4):   # Batch objects
        ...

Tables are found where the embedded metastore keeps managed tables
(``<warehouse>/<database>.db/<table>``) and read through Delta's log only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest import kernels
from ingest.block import Block, Sparse
from ingest.loader import SnapshotDataset
from ingest.projected_reads import Coalescing
from ingest.snapshot import Snapshot, open_snapshot
from ingest.spec import JobSpec
from ingest.transforms import (
    Transform,
    apply_dense_columns,
    needs_stats,
    parse_transforms,
    resolve_stats,
    sparse_key,
)
from schemas.catalog import FEATURE_STATS, catalog_table_uri, managed_table_uri
from schemas.errors import ConfigError, TableError
from schemas.names import format_ds
from schemas.registry import DatasetRegistry, Kind
from schemas.storage import Store

FEATURE_DATABASE = "featurehouse"


@dataclass(frozen=True)
class Converter:
    """Turns a row group of the spec's columns (pyarrow) into a :class:`Block` of transformed rows, which the
    loader shuffles and cuts into batches (picklable for worker processes).

    Dense features with the same transforms go through them together, as one matrix.
    """

    dense: tuple[tuple[str, tuple[Transform, ...]], ...]
    sparse: tuple[tuple[str, tuple[Transform, ...]], ...]
    labels: tuple[tuple[str, str], ...]  # (label name, column)

    def __post_init__(self) -> None:
        kernels.warm_up()  # compiled (or loaded from the disk cache) as the reader is made, not in its first step

    @cached_property
    def _dense_groups(self) -> tuple[tuple[tuple[Transform, ...], tuple[int, ...]], ...]:
        """(transforms, the positions of the dense features that have them), in order of first appearance."""
        groups: dict[tuple[Transform, ...], list[int]] = {}
        for position, (_name, transforms) in enumerate(self.dense):
            groups.setdefault(transforms, []).append(position)
        return tuple((transforms, tuple(positions)) for transforms, positions in groups.items())

    def __call__(self, table: pa.Table) -> Block:
        dense = np.empty((table.num_rows, len(self.dense)), dtype=np.float32)
        for transforms, positions in self._dense_groups:
            names = [self.dense[p][0] for p in positions]
            try:
                values = apply_dense_columns([table.column(name) for name in names], transforms)
            except (ConfigError, TableError) as err:
                raise type(err)(f"dense feature(s) {', '.join(names)}: {err}") from err
            if len(positions) == len(self.dense):
                dense = values
            else:
                dense[:, positions] = values
        keys, masks = [], []
        for name, transforms in self.sparse:
            key, keep = _sparse(table, name, transforms)
            keys.append(key)
            masks += [] if keep is None else [keep]
        values, offsets, weights, keep = kernels.sparse_keys(keys, table.num_rows)  # every key in one pass
        masks += [keep] if any(key.drop for key in keys) else []
        return Block.of_sparse(
            [name for name, _ts in self.dense],
            dense,
            [name for name, _ts in self.sparse],
            Sparse(values, offsets, weights),
            {name: table.column(column).to_numpy().astype(np.float32) for name, column in self.labels},
            np.logical_and.reduce(masks) if masks else None,
        )


def _sparse(
    table: pa.Table, name: str, transforms: tuple[Transform, ...]
) -> tuple[kernels.SparseKey, np.ndarray | None]:
    try:
        return sparse_key(table.column(name), transforms)
    except (ConfigError, TableError) as err:
        raise type(err)(f"sparse feature {name}: {err}") from err


def pooled_stats(stats: pa.Table, feature: str) -> tuple[float, float] | None:
    """Mean and sample stddev of a feature over several partitions' (non_null, mean, stddev) rows."""
    rows = stats.filter(pc.equal(stats.column("feature"), feature))
    n = np.asarray(rows.column("non_null").to_numpy(zero_copy_only=False), dtype=np.float64)
    mean = np.asarray(rows.column("mean").to_numpy(zero_copy_only=False), dtype=np.float64)
    std = np.asarray(rows.column("stddev").to_numpy(zero_copy_only=False), dtype=np.float64)
    usable = (n > 1) & ~np.isnan(mean) & ~np.isnan(std)
    n, mean, std = n[usable], mean[usable], std[usable]
    if n.sum() < 2:
        return None
    overall = float((n * mean).sum() / n.sum())
    variance = ((n - 1) * std**2 + n * (mean - overall) ** 2).sum() / (n.sum() - 1)
    return overall, float(np.sqrt(variance))


def catalog_statistics(store: Store, spec: JobSpec) -> pa.Table:
    """The catalog's feature_stats rows of the spec's dataset and partitions (read with deltalake)."""
    import deltalake

    uri = catalog_table_uri(store.warehouse, FEATURE_STATS)
    try:
        table = deltalake.DeltaTable(uri, storage_options=store.delta_options())
    except Exception as err:  # deltalake raises several types for a missing table
        raise ConfigError(
            f"{spec.source}: standardize needs catalog statistics, but {uri} is not readable ({err}); run "
            f"featurehouse catalog stats --dataset {spec.dataset} --ds ... first"
        ) from err
    days = [format_ds(d) for d in spec.days]
    data = pa.table(table.to_pyarrow_table(columns=["dataset", "ds", "feature", "non_null", "mean", "stddev"]))
    return data.filter(pc.and_(pc.equal(data.column("dataset"), spec.dataset), pc.is_in(data.column("ds"), pa.array(days))))


def make_converter(spec: JobSpec, registry: DatasetRegistry, *, warehouse: str | Store) -> Converter:
    """Parse every feature's transforms, resolving catalog statistics where ``standardize`` asks for them."""
    parsed = {f.name: parse_transforms(registry.by_name[f.name], f.transforms, source=spec.source) for f in spec.features}
    if any(needs_stats(ts) for ts in parsed.values()):
        stats = catalog_statistics(as_store(warehouse), spec)
        parsed = {name: resolve_stats(ts, pooled_stats(stats, name), feature=name) for name, ts in parsed.items()}
    kinds = {name: registry.by_name[name].kind for name in parsed}
    return Converter(
        dense=tuple((n, ts) for n, ts in parsed.items() if kinds[n] is Kind.DENSE),
        sparse=tuple((n, ts) for n, ts in parsed.items() if kinds[n] is not Kind.DENSE),
        labels=tuple((label, f"label_{label}") for label in spec.labels),
    )


@dataclass(frozen=True)
class Reader:
    spec: JobSpec
    snapshot: Snapshot
    dataset: SnapshotDataset


def as_store(warehouse: str | Store) -> Store:
    """A warehouse given as a local folder (or URI) or as a :class:`Store`, as a Store."""
    return warehouse if isinstance(warehouse, Store) else Store(warehouse=str(warehouse))


def open_reader(
    spec: JobSpec,
    registry: DatasetRegistry,
    *,
    warehouse: str | Store,
    version: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> Reader:
    """A reader of ``spec`` over the feature table under ``warehouse`` (a local folder, or a :class:`Store`: a
    folder or an S3 bucket with its endpoint and keys), pinned at ``version`` (default: latest)."""
    store = as_store(warehouse)
    location = managed_table_uri(store.warehouse, FEATURE_DATABASE, spec.dataset)
    snapshot = open_snapshot(location, spec.days, version=version, store=store if store.on_s3 else None)
    if not snapshot.files:
        raise ConfigError(
            f"{spec.source}: table {FEATURE_DATABASE}.{spec.dataset} has none of the partitions "
            f"{format_ds(spec.days[0])} .. {format_ds(spec.days[-1])} at version {snapshot.version}"
        )
    converter = make_converter(spec, registry, warehouse=store)
    columns = [*spec.feature_names, *(column for _label, column in converter.labels)]
    dataset = SnapshotDataset(
        snapshot, registry, columns, batch_size=spec.batch_size, shuffle_buffer=spec.shuffle_buffer,
        seed=spec.seed, drop_last=spec.drop_last, rank=rank,
        world_size=world_size, convert=converter, coalescing=Coalescing(gap=spec.read_gap),
    )  # fmt: skip
    return Reader(spec, snapshot, dataset)
