"""Per-feature transforms declared in a job spec, parsed once and applied to whole columns.

A feature's ``transforms`` list holds bare strings or one-key mappings, applied in order::

    - name: user_ctr_7d                  # dense
      transforms: [{fill: 0.0}, {clamp: [0, 1]}, log1p, standardize]
    - name: item_topic_ids               # sparse or weighted_sparse
      transforms: [{hash: 100000}, {truncate: 20}, drop_empty]

Dense (computed in float64, returned as float32):

* ``{fill: v}``: nulls and NaN become ``v``. The registry's ``fill_value`` is appended as a
  last fill unless the list already ends with one, so a dense output never holds a null.
* ``{clamp: [lo, hi]}``: values below ``lo`` become ``lo``, above ``hi`` become ``hi``; a ``null``
  bound is none on that side (``{clamp: [0, null]}`` turns negatives into 0).
* ``log1p``: ``log(1 + x)``. Values must be > -1 when it runs; a value <= -1 is refused
  when the data is seen, so put ``{clamp: [0, ...]}`` (or any lo > -1) before it.
* ``{standardize: {mean: m, stddev: s}}``: ``(x - m) / s`` with ``s > 0``. Bare ``standardize``
  means "the catalog's statistics" of the stored values, which the caller fills in with
  :func:`resolve_stats`; so only ``fill`` may come before it.

Sparse (ids; weights, when present, follow their ids):

* ``{hash: N}``: each id becomes ``splitmix64(id) % N`` (the id's 64 bits as unsigned),
  the same on every run and platform.
* ``{truncate: k}``: keep the first ``k`` ids of each list.
* ``drop_empty``: rows whose list is empty or null are dropped from the whole sample;
  :func:`apply_sparse` returns them as ``keep`` (False = drop) and ``ingest.batch.make_batch``
  drops them from every column.

Null lists have length 0; a null id (or a null weighted entry, id or weight) is dropped from its list.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ingest import kernels
from schemas.errors import ConfigError, TableError
from schemas.registry import Feature, Kind

_DENSE_HELP = "{fill: 0.0}, {clamp: [lo, hi]}, log1p, standardize or {standardize: {mean: m, stddev: s}}"
_SPARSE_HELP = "{hash: N}, {truncate: k}, drop_empty"


@dataclass(frozen=True)
class SparseColumn:
    """One sparse feature for B rows: ids, list lengths, optional weights and a row keep-mask."""

    values: np.ndarray  # int64[total]
    lengths: np.ndarray  # int32[B]
    weights: np.ndarray | None = None  # float32[total], weighted_sparse only
    keep: np.ndarray | None = None  # bool[B]; False marks a row drop_empty drops

    def __post_init__(self) -> None:
        total = int(self.lengths.sum(dtype=np.int64))
        if self.values.ndim != 1 or self.lengths.ndim != 1 or total != len(self.values):
            raise ConfigError(
                f"sparse column has {len(self.values)} values but its lengths add up to {total}; "
                "values and lengths must be 1-D and agree"
            )
        if self.weights is not None and self.weights.shape != self.values.shape:
            raise ConfigError(
                f"sparse column has {len(self.values)} ids but {len(self.weights)} weights; give one weight per id"
            )
        if self.keep is not None and self.keep.shape != self.lengths.shape:
            raise ConfigError(f"sparse column has {len(self.lengths)} rows but a keep mask of {len(self.keep)}")

    def __len__(self) -> int:
        return len(self.lengths)

    def filter(self, keep: np.ndarray) -> SparseColumn:
        """The rows where ``keep`` is True (and no keep mask of its own)."""
        per_value = np.repeat(keep, self.lengths)
        weights = None if self.weights is None else self.weights[per_value]
        return SparseColumn(self.values[per_value], self.lengths[keep], weights)

    def _keep_values(self, mask: np.ndarray) -> SparseColumn:
        """Drop individual values where ``mask`` is False, shortening their rows."""
        rows = np.repeat(np.arange(len(self.lengths)), self.lengths)
        lengths = np.bincount(rows[mask], minlength=len(self.lengths)).astype(np.int32)
        weights = None if self.weights is None else self.weights[mask]
        return SparseColumn(self.values[mask], lengths, weights, self.keep)


# --- dense transforms: a float64 array (NaN = null), changed in place and returned ---


@dataclass(frozen=True)
class Fill:
    name: ClassVar[str] = "fill"
    value: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x[np.isnan(x)] = self.value
        return x


@dataclass(frozen=True)
class Clamp:
    name: ClassVar[str] = "clamp"
    lo: float
    hi: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, self.lo, self.hi, out=x)


@dataclass(frozen=True)
class Log1p:
    name: ClassVar[str] = "log1p"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        bad = x <= -1.0
        if bad.any():
            raise ConfigError(
                f"log1p got {int(bad.sum())} values <= -1 (smallest {np.nanmin(x)}); it needs values > -1: "
                "put {clamp: [0, hi]} (or any lo > -1) before log1p in the feature's transforms"
            )
        # torch's log1p is vectorized with AVX2 (Sleef); numpy's only with AVX-512, and 6x slower without it
        torch.from_numpy(x).log1p_()  # in place
        return x


@dataclass(frozen=True)
class Standardize:
    """``(x - mean) / stddev``; without statistics (bare ``standardize``) until :meth:`with_stats`."""

    name: ClassVar[str] = "standardize"
    mean: float | None = None
    stddev: float | None = None

    @property
    def resolved(self) -> bool:
        return self.mean is not None and self.stddev is not None

    def with_stats(self, mean: float, stddev: float) -> Standardize:
        return Standardize(mean, stddev)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.mean is None or self.stddev is None:
            raise ConfigError(
                "standardize has no mean/stddev yet; call ingest.transforms.resolve_stats with the catalog's "
                "statistics before applying, or write {standardize: {mean: m, stddev: s}} in the spec"
            )
        x -= self.mean
        x /= self.stddev
        return x


# --- sparse transforms: SparseColumn in, SparseColumn out ---

def splitmix64(ids: np.ndarray, buckets: int | None = None) -> np.ndarray:
    """The splitmix64 finalizer of each id's 64 bits (uint64 out), ``% buckets`` when given;
    ``splitmix64([0]) == [0xE220A8397B1DCDAF]``. One compiled pass over a copy of ``ids`` (ingest/kernels.py).
    """
    return kernels.splitmix64(ids, buckets)


@dataclass(frozen=True)
class Hash:
    name: ClassVar[str] = "hash"
    buckets: int

    def __call__(self, col: SparseColumn) -> SparseColumn:
        return replace(col, values=splitmix64(col.values, self.buckets).view(np.int64))


@dataclass(frozen=True)
class Truncate:
    name: ClassVar[str] = "truncate"
    k: int

    def __call__(self, col: SparseColumn) -> SparseColumn:
        if not len(col.lengths) or col.lengths.max() <= self.k:
            return col  # nothing to cut
        starts = np.cumsum(col.lengths, dtype=np.int64) - col.lengths
        position = np.arange(len(col.values), dtype=np.int64) - np.repeat(starts, col.lengths)
        kept = position < self.k
        weights = None if col.weights is None else col.weights[kept]
        return SparseColumn(col.values[kept], np.minimum(col.lengths, self.k), weights, col.keep)


@dataclass(frozen=True)
class DropEmpty:
    name: ClassVar[str] = "drop_empty"

    def __call__(self, col: SparseColumn) -> SparseColumn:
        keep = col.lengths > 0
        return replace(col, keep=keep if col.keep is None else col.keep & keep)


Transform = Fill | Clamp | Log1p | Standardize | Hash | Truncate | DropEmpty
DENSE_TRANSFORMS: tuple[type, ...] = (Fill, Clamp, Log1p, Standardize)
SPARSE_TRANSFORMS: tuple[type, ...] = (Hash, Truncate, DropEmpty)


# --- parsing ---


def _number(arg: Any) -> float | None:
    if isinstance(arg, bool) or not isinstance(arg, int | float) or not math.isfinite(arg):
        return None
    return float(arg)


def _count(arg: Any) -> int | None:
    return arg if isinstance(arg, int) and not isinstance(arg, bool) and 1 <= arg < 2**63 else None


def _parse_fill(arg: Any) -> Transform | str:
    value = _number(arg)
    return Fill(value) if value is not None else f"fill takes a finite number, found {arg!r}; write {{fill: 0.0}}"


def _parse_clamp(arg: Any) -> Transform | str:
    """``[lo, hi]``; a null bound is no bound on that side (``[0, null]``: negatives become 0)."""
    pair = isinstance(arg, list | tuple) and len(arg) == 2 and list(arg) != [None, None]
    edges = (-math.inf, math.inf)
    bounds = [_number(b) if b is not None else edge for b, edge in zip(arg, edges, strict=True)] if pair else [None]
    if None in bounds or bounds[0] > bounds[1]:
        return (f"clamp takes [lo, hi] with finite numbers lo <= hi (null for no bound on one side), found {arg!r}; "
                "write {clamp: [0, 1]} or {clamp: [0, null]}")  # fmt: skip
    return Clamp(*bounds)


def _parse_standardize(arg: Any) -> Transform | str:
    if arg is None:
        return Standardize()
    stats = {k: _number(v) for k, v in arg.items()} if isinstance(arg, Mapping) else {}
    if set(stats) != {"mean", "stddev"} or None in stats.values() or stats["stddev"] <= 0:
        return (
            f"standardize takes {{mean: m, stddev: s}} with finite numbers and s > 0, found {arg!r}; "
            "write {standardize: {mean: 0.5, stddev: 2.0}} or bare standardize for the catalog's statistics"
        )
    return Standardize(stats["mean"], stats["stddev"])


def _parse_count(cls: type, example: str) -> Callable[[Any], Transform | str]:
    def parse(arg: Any) -> Transform | str:
        n = _count(arg)
        return cls(n) if n is not None else f"{cls.name} takes a positive integer, found {arg!r}; write {example}"

    return parse


def _no_arg(cls: type) -> Callable[[Any], Transform | str]:
    def parse(arg: Any) -> Transform | str:
        return cls() if arg is None else f"{cls.name} takes no argument, found {arg!r}; write it as bare {cls.name}"

    return parse


_PARSERS: dict[str, tuple[frozenset[Kind], Callable[[Any], Transform | str]]] = {
    "fill": (frozenset({Kind.DENSE}), _parse_fill),
    "clamp": (frozenset({Kind.DENSE}), _parse_clamp),
    "log1p": (frozenset({Kind.DENSE}), _no_arg(Log1p)),
    "standardize": (frozenset({Kind.DENSE}), _parse_standardize),
    "hash": (frozenset({Kind.SPARSE, Kind.WEIGHTED_SPARSE}), _parse_count(Hash, "{hash: 100000}")),
    "truncate": (frozenset({Kind.SPARSE, Kind.WEIGHTED_SPARSE}), _parse_count(Truncate, "{truncate: 20}")),
    "drop_empty": (frozenset({Kind.SPARSE, Kind.WEIGHTED_SPARSE}), _no_arg(DropEmpty)),
}
_NEEDS_ARG = frozenset({"fill", "clamp", "hash", "truncate"})


def parse_transforms(feature: Feature, raw: Sequence[Any], *, source: str) -> tuple[Transform, ...]:
    """Validate a feature's spec transforms once; dense ones end with a fill, so no null survives.

    >>> parse_transforms(user_ctr_7d, [{"clamp": [0, 1]}, "log1p"], source="jobs/ctr.yaml")
    (Clamp(lo=0.0, hi=1.0), Log1p(), Fill(value=0.0))
    """
    allowed = _DENSE_HELP if feature.kind is Kind.DENSE else _SPARSE_HELP
    where = f"{source}: feature {feature.name!r} ({feature.kind.value})"
    help_ = f"transforms allowed for {feature.kind.value} features: {allowed}"
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise ConfigError(f"{where}: transforms is {type(raw).__name__} {raw!r}, not a list; write [...] of {allowed}")
    out: list[Transform] = []
    for i, entry in enumerate(raw):
        if isinstance(entry, str):
            name, arg = entry, None
            if name in _NEEDS_ARG:
                raise ConfigError(f"{where}: transforms[{i}] {name!r} needs an argument; {help_}")
        elif isinstance(entry, Mapping) and len(entry) == 1:
            [(name, arg)] = entry.items()
        else:
            raise ConfigError(f"{where}: transforms[{i}] is {entry!r}, not a name or a one-key mapping; {help_}")
        if name not in _PARSERS:
            raise ConfigError(f"{where}: transforms[{i}] {name!r} is not a transform; {help_}")
        kinds, parse = _PARSERS[name]
        if feature.kind not in kinds:
            fits = " or ".join(sorted(k.value for k in kinds))
            raise ConfigError(f"{where}: transforms[{i}] {name!r} is for {fits} features; {help_}")
        if any(t.name == name for t in out):
            raise ConfigError(f"{where}: transforms[{i}] {name!r} is listed twice; list each transform once")
        parsed = parse(arg)
        if isinstance(parsed, str):
            raise ConfigError(f"{where}: transforms[{i}]: {parsed}; {help_}")
        if isinstance(parsed, Standardize) and not parsed.resolved and any(not isinstance(t, Fill) for t in out):
            raise ConfigError(
                f"{where}: transforms[{i}] bare standardize uses the catalog's mean and stddev of the stored values, "
                "so only fill may come before it; move it first, or give {standardize: {mean: m, stddev: s}} of "
                "the transformed values"
            )
        out.append(parsed)
    if feature.kind is Kind.DENSE and not (out and isinstance(out[-1], Fill)):
        out.append(Fill(float(feature.fill_value)))  # type: ignore[arg-type]  # dense: a number
    return tuple(out)


def needs_stats(transforms: Sequence[Transform]) -> bool:
    """Whether a bare ``standardize`` still waits for the catalog's mean and stddev."""
    return any(isinstance(t, Standardize) and not t.resolved for t in transforms)


def resolve_stats(
    transforms: Sequence[Transform], stats: tuple[float | None, float | None] | None, *, feature: str
) -> tuple[Transform, ...]:
    """Fill a bare ``standardize`` with ``stats = (mean, stddev)`` from the catalog; others pass through."""
    if not needs_stats(transforms):
        return tuple(transforms)
    mean, stddev = stats if stats is not None else (None, None)
    if _number(mean) is None or _number(stddev) is None or stddev <= 0:  # type: ignore[operator]
        raise ConfigError(
            f"feature {feature!r}: standardize needs the catalog's mean and stddev > 0, found "
            f"mean={mean!r} stddev={stddev!r}; run the stats job for its partitions or write "
            "{standardize: {mean: m, stddev: s}} in the spec"
        )
    return tuple(
        t.with_stats(mean, stddev) if isinstance(t, Standardize) and not t.resolved else t  # type: ignore[arg-type]
        for t in transforms
    )


# --- applying ---


def _combined(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    return array


def apply_dense(array: pa.Array | pa.ChunkedArray, transforms: Sequence[Transform]) -> np.ndarray:
    """A dense column through its transforms: float32[B], no nulls or NaN left."""
    return np.ascontiguousarray(apply_dense_columns([array], transforms)[:, 0])


def apply_dense_columns(arrays: Sequence[pa.Array | pa.ChunkedArray], transforms: Sequence[Transform]) -> np.ndarray:
    """Dense columns of B rows that share their transforms, through them: float32[B, len(arrays)], one
    column per array, no nulls or NaN left. One compiled pass for all of them between each two ``log1p``
    (ingest/kernels.py), which read the Arrow buffers in place; ``log1p`` itself is torch's.

    Every transform maps a missing value (null or NaN) to a missing value except ``fill``, so a
    missing row's result is the same everywhere: the transforms applied to one NaN. The kernels
    carry a missing value as NaN through the other transforms and write that one result in its place.
    """
    for transform in transforms:
        if not isinstance(transform, DENSE_TRANSFORMS):
            raise ConfigError(f"{transform!r} is not a dense transform; dense ones are {_DENSE_HELP}")
    transforms = tuple(transforms)
    programs, missing = _dense_program(transforms)
    rows = len(arrays[0]) if arrays else 0
    columns, held = [], []
    for array in arrays:
        if not (pa.types.is_floating(array.type) or pa.types.is_integer(array.type)):
            raise TableError(f"dense column has Arrow type {array.type}; a dense feature is float32 or float64")
        array = _combined(array)
        if not (pa.types.is_float32(array.type) or pa.types.is_float64(array.type)):
            array = pc.cast(array, pa.float64(), safe=False)  # as numpy converts: to the nearest float64
        held.append(array)  # the kernels read its buffers
        columns.append(_dense_buffers(array))
    if rows == 0:
        return np.empty((0, len(arrays)), dtype=np.float32)
    out, bad = kernels.dense_columns(columns, rows, programs, missing, _log1p)
    if bad:
        raise ConfigError(
            f"log1p got {bad} values <= -1 (smallest {np.nanmin(out)}); it needs values > -1: "
            "put {clamp: [0, hi]} (or any lo > -1) before log1p in the feature's transforms"
        )
    if math.isnan(missing) and np.isnan(out).any():
        raise ConfigError(
            f"dense transforms {transforms!r} leave {int(np.isnan(out).sum())} nulls; end them with a Fill "
            "(parse_transforms does)"
        )
    return out


_LOG1P_PIECE = 2048  # torch's grain for log1p: a piece this size runs on the calling thread


def _log1p(x: np.ndarray) -> None:
    """In place, with torch: vectorized with AVX2 (numpy's log1p is only with AVX-512, and 6x slower without it),
    and the function the values were made with before the kernels (numba's, LLVM's, differs in the last bit).

    In pieces of 2048 values, one C++ loop over them: on a whole row group torch forks its OpenMP threads
    and joins them, which on 2 cores with the read-ahead thread decoding on the other took 15x the time of
    the log1p itself (10 columns of 12,500 rows: 6.7 ms against 0.43 ms). Same values, piece by piece.
    """
    torch._foreach_log1p_(torch.from_numpy(x).view(-1).split(_LOG1P_PIECE))


@functools.lru_cache(maxsize=256)
def _dense_program(transforms: tuple[Transform, ...]) -> tuple[tuple[np.ndarray, ...], float]:
    """The kernels' programs of ``transforms`` (the runs of clamps and standardizes between each two log1p;
    a fill changes missing values only) and the value every missing one ends as."""
    programs: list[list[tuple[float, float, float]]] = [[]]
    for transform in transforms:
        if isinstance(transform, Log1p):
            programs.append([])
        elif isinstance(transform, Clamp):
            programs[-1].append((kernels.CLAMP, transform.lo, transform.hi))
        elif isinstance(transform, Standardize):
            transform(np.zeros(1))  # refuses one without statistics
            programs[-1].append((kernels.STANDARDIZE, transform.mean, transform.stddev))
    value = np.full(1, np.nan)
    for transform in transforms:
        value = transform(value)
    return tuple(np.array(p, dtype=np.float64).reshape(len(p), 3) for p in programs), float(value[0])


def _dense_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None, int]:
    """A float32 or float64 array's values (in place; a null's slot holds anything), its validity bitmap
    (None without nulls) and the bit where its first row is."""
    buffers = array.buffers()
    dtype = np.float32 if pa.types.is_float32(array.type) else np.float64
    data = np.frombuffer(buffers[1], dtype=dtype)[array.offset : array.offset + len(array)]
    valid = np.frombuffer(buffers[0], dtype=np.uint8) if array.null_count else None
    return data, valid, array.offset


def _to_column(array: pa.Array | pa.ChunkedArray) -> SparseColumn:
    array = _combined(array)
    list_type = array.type
    if not (pa.types.is_list(list_type) or pa.types.is_large_list(list_type)):
        raise TableError(f"sparse column has Arrow type {list_type}; a sparse feature is a list of ids")
    if array.null_count == 0:  # the common case, without a copy: lengths from the offsets, ids as they are
        offsets = array.offsets.to_numpy()
        lengths = np.diff(offsets).astype(np.int32)
        flat = array.values.slice(offsets[0], offsets[-1] - offsets[0])
    else:
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy().astype(np.int32)
        flat = array.flatten()  # the non-null lists' elements, slicing taken care of
    if pa.types.is_integer(flat.type):
        ids, weights = flat, None
    elif pa.types.is_struct(flat.type) and {"id", "weight"} <= {field.name for field in flat.type}:
        children = flat.flatten()  # parent nulls merged into each child
        ids = children[flat.type.get_field_index("id")]
        weights = children[flat.type.get_field_index("weight")]
    else:
        raise TableError(f"sparse column has Arrow type {list_type}; elements must be int64 or struct<id, weight>")
    valid = ids.is_valid() if weights is None else pc.and_(ids.is_valid(), weights.is_valid())
    column = SparseColumn(
        _numpy(ids, pa.int64(), 0),
        lengths,
        None if weights is None else _numpy(weights, pa.float32(), 0.0),
    )
    if ids.null_count or (weights is not None and weights.null_count):
        column = column._keep_values(valid.to_numpy(zero_copy_only=False))
    return column


def _numpy(array: pa.Array, type_: pa.DataType, null: float) -> np.ndarray:
    """``array`` as ``type_`` in numpy, nulls as ``null`` (read-only, and no copy when nothing needs changing)."""
    if array.type != type_:
        array = pc.cast(array, type_)
    return (pc.fill_null(array, null) if array.null_count else array).to_numpy()


def apply_sparse(array: pa.Array | pa.ChunkedArray, transforms: Sequence[Transform]) -> SparseColumn:
    """A sparse or weighted sparse column through its transforms (see the module docstring).

    ``truncate`` runs first wherever it is listed: ``hash`` maps each id alone and ``drop_empty``
    sees no list emptied by a cut of k >= 1, so the result is the same, and the cut ids are not hashed.
    """
    key, keep = sparse_key(array, transforms)
    values, offsets, weights, kept = kernels.sparse_keys([key], len(key.offsets) - 1)
    return SparseColumn(values, np.diff(offsets[0]).astype(np.int32), weights, kept if key.drop else keep)


def sparse_key(
    array: pa.Array | pa.ChunkedArray, transforms: Sequence[Transform]
) -> tuple[kernels.SparseKey, np.ndarray | None]:
    """A sparse column and its transforms as :func:`ingest.kernels.sparse_keys` takes them, and the keep mask
    of what was applied here (None when nothing was). The Arrow buffers are read in place when the column
    has no nulls (the caller holds ``array`` while the kernels run); one hash and one truncate at most go to
    the kernels, and any other list of transforms is applied here first, in order.
    """
    for transform in transforms:
        if not isinstance(transform, SPARSE_TRANSFORMS):
            raise ConfigError(f"{transform!r} is not a sparse transform; sparse ones are {_SPARSE_HELP}")
    hashes = [t.buckets for t in transforms if isinstance(t, Hash)]
    limits = [t.k for t in transforms if isinstance(t, Truncate)]
    drop = any(isinstance(t, DropEmpty) for t in transforms)
    array = _combined(array)
    if len(hashes) > 1 or len(limits) > 1:  # not from a spec (parse_transforms lists each once): one by one
        column = _to_column(array)
        for transform in sorted(transforms, key=lambda t: not isinstance(t, Truncate)):  # stable: the rest keep order
            column = transform(column)
        return kernels.SparseKey(kernels.offsets_of(column.lengths), column.values, column.weights), column.keep
    options = {"limit": limits[0] if limits else None, "buckets": hashes[0] if hashes else None, "drop": drop}
    list_type = array.type
    if (
        (pa.types.is_list(list_type) or pa.types.is_large_list(list_type))
        and pa.types.is_int64(list_type.value_type)
        and array.null_count == 0
        and array.values.null_count == 0
    ):  # the common case: offsets and ids as they are, no copy
        return kernels.SparseKey(array.offsets.to_numpy(), array.values.to_numpy(), **options), None
    column = _to_column(array)
    offsets = kernels.offsets_of(column.lengths)
    return kernels.SparseKey(offsets, np.ascontiguousarray(column.values), column.weights, **options), None
