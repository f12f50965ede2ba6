"""Transformed rows before batching: what the loader caches, shuffles and cuts into batches.

The loader converts each row group it reads once into a :class:`Block` (every
transform applied to whole columns), cuts a window's rows out of blocks, and makes
each batch by gathering its rows of the shuffled window; all numpy, no per-row
Python. Transforms work row by row, so converting before shuffling gives exactly
the rows that converting each batch would::

    row group (pyarrow) --Converter--> Block --slice/concat--> window
        --batch(the batch's rows of the window's permutation)--> Batch (torch)

Sparse ids are kept per key as a :class:`Jagged` (values and offsets); a slice is a
view, so the only copy of a value is the gather that puts it into its batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ingest.batch import Batch
from ingest.transforms import SparseColumn
from schemas.errors import ConfigError


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    offsets[1:] = lengths
    return _cumsum(offsets)


def _cumsum(a: np.ndarray) -> np.ndarray:
    """``a`` (int64) turned into its running sum in place: torch's loop is 6x faster than numpy's integer cumsum."""
    torch.from_numpy(a).cumsum_(0)
    return a


def _gather(source: np.ndarray, index: np.ndarray, **kwargs) -> np.ndarray:
    """``np.take`` of indices made here, always in range: ``mode="wrap"`` skips the per-index bounds
    check of the default mode, which costs take 40% of its time."""
    return np.take(source, index, mode="wrap", **kwargs)


@dataclass(frozen=True)
class Jagged:
    """Lists for n rows: row i is ``values[offsets[i]:offsets[i + 1]]``; ``offsets[0]`` may be above 0 (a slice)."""

    values: np.ndarray  # int64
    offsets: np.ndarray  # int64[n + 1]
    weights: np.ndarray | None = None  # float32, one per value

    @classmethod
    def of(cls, column: SparseColumn) -> Jagged:
        return cls(column.values, _offsets(column.lengths), column.weights)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def flat(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The values (and weights) of these rows, contiguous (views)."""
        lo, hi = int(self.offsets[0]), int(self.offsets[-1])
        return self.values[lo:hi], None if self.weights is None else self.weights[lo:hi]

    def slice(self, start: int, stop: int) -> Jagged:
        return Jagged(self.values, self.offsets[start : stop + 1], self.weights)

    def select(self, rows: np.ndarray | None) -> tuple[np.ndarray | slice, np.ndarray]:
        """Where ``rows`` (None: all, in order) find their values, and their lengths.

        The index runs up by one inside a row and jumps between rows, so it is the running sum
        of ones with each non-empty row's jump at its first position (one pass, no ``np.repeat``).
        """
        if rows is None:
            return slice(int(self.offsets[0]), int(self.offsets[-1])), self.lengths
        starts, ends = _gather(self.offsets, rows), _gather(self.offsets, rows + 1)
        lengths = ends - starts
        at = _offsets(lengths)[:-1]
        total = int(at[-1] + lengths[-1]) if len(rows) else 0
        if total == 0:
            return np.empty(0, np.int64), lengths
        if not lengths.all():
            filled = np.flatnonzero(lengths)
            starts, ends, at = starts[filled], ends[filled], at[filled]
        index = np.ones(total, np.int64)
        index[at[1:]] = starts[1:] - ends[:-1] + 1
        index[0] = starts[0]
        return _cumsum(index), lengths

    @staticmethod
    def concat(parts: Sequence[Jagged]) -> Jagged:
        if len(parts) == 1:
            return parts[0]
        flats = [p.flat() for p in parts]
        weights = None if parts[0].weights is None else np.concatenate([w for _v, w in flats])
        offsets = _offsets(np.concatenate([p.lengths for p in parts]))
        return Jagged(np.concatenate([v for v, _w in flats]), offsets, weights)


@dataclass(frozen=True)
class Keys:
    dense: tuple[str, ...]
    sparse: tuple[str, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """n transformed rows: ``dense`` float32[n, D], one :class:`Jagged` per sparse key, ``labels`` float32[n, L],
    and ``keep`` (False where ``drop_empty`` drops the row when it is batched)."""

    keys: Keys
    dense: np.ndarray
    sparse: tuple[Jagged, ...]
    labels: np.ndarray
    keep: np.ndarray | None = None

    @classmethod
    def of(
        cls, dense: Mapping[str, np.ndarray], sparse: Mapping[str, SparseColumn], labels: Mapping[str, np.ndarray]
    ) -> Block:
        """A block from per-feature columns of equal row count, keys in the mappings' order."""
        rows = _row_count(dense, sparse, labels)
        return cls.of_matrix(tuple(dense), _matrix(dense, rows), sparse, labels)

    @classmethod
    def of_matrix(
        cls, dense_keys: Sequence[str], dense: np.ndarray, sparse: Mapping[str, SparseColumn],
        labels: Mapping[str, np.ndarray],
    ) -> Block:  # fmt: skip
        """A block whose dense features come as one float32[n, len(dense_keys)] matrix, columns in key order."""
        rows = dense.shape[0]
        counts = {len(c) for c in [*sparse.values(), *labels.values()]}
        if dense.shape != (rows, len(dense_keys)) or counts - {rows}:
            raise ConfigError(f"block parts differ: dense {dense.shape} for keys {tuple(dense_keys)}, sparse and "
                              f"label columns of {sorted(counts)} rows; every part must have the same rows")  # fmt: skip
        masks = [c.keep for c in sparse.values() if c.keep is not None]
        return cls(
            Keys(tuple(dense_keys), tuple(sparse), tuple(labels)),
            dense,
            tuple(Jagged.of(c) for c in sparse.values()),
            _matrix(labels, rows),
            np.logical_and.reduce(masks) if masks else None,
        )

    def __len__(self) -> int:
        return self.dense.shape[0]

    def _with(self, dense, sparse, labels, keep) -> Block:
        return Block(self.keys, dense, tuple(sparse), labels, keep)

    def slice(self, start: int, stop: int) -> Block:
        keep = None if self.keep is None else self.keep[start:stop]
        return self._with(self.dense[start:stop], (j.slice(start, stop) for j in self.sparse),
                          self.labels[start:stop], keep)  # fmt: skip

    @staticmethod
    def concat(parts: Sequence[Block]) -> Block:
        if len(parts) == 1:
            return parts[0]
        keeps = [p.keep for p in parts]
        keep = None if keeps[0] is None else np.concatenate(keeps)
        sparse = (Jagged.concat([p.sparse[k] for p in parts]) for k in range(len(parts[0].keys.sparse)))
        return parts[0]._with(np.concatenate([p.dense for p in parts]), sparse,
                              np.concatenate([p.labels for p in parts]), keep)  # fmt: skip

    def batch(self, rows: np.ndarray | None = None) -> Batch:
        """Rows ``rows`` (default: all, in order) as a :class:`Batch`, without those ``keep`` marks False.

        Every value is copied once, straight into its place in the batch (sparse keys key-major).
        """
        if self.keep is not None and not self.keep.all():
            rows = np.flatnonzero(self.keep) if rows is None else rows[_gather(self.keep, rows)]
        dense, labels = self.dense, self.labels
        if rows is not None:
            dense, labels = _gather(dense, rows, axis=0), _gather(labels, rows, axis=0)  # 4x faster than [rows]
        selected = [j.select(rows) for j in self.sparse]
        sizes = np.cumsum([0] + [int(n.sum()) for _i, n in selected])
        values = np.empty(sizes[-1], np.int64)
        weighted = any(j.weights is not None for j in self.sparse)
        weights = np.ones(sizes[-1], np.float32) if weighted else None
        for k, (j, (where, _n)) in enumerate(zip(self.sparse, selected, strict=True)):
            out = slice(sizes[k], sizes[k + 1])
            _put(j.values, where, values[out])
            if j.weights is not None:
                _put(j.weights, where, weights[out])
        lengths = np.concatenate([n for _i, n in selected]) if selected else np.empty(0, np.int32)
        return Batch(
            dense=torch.from_numpy(np.ascontiguousarray(dense)),
            dense_keys=self.keys.dense,
            sparse_keys=self.keys.sparse,
            values=torch.from_numpy(values),
            lengths=torch.from_numpy(lengths.astype(np.int32, copy=False)),
            weights=None if weights is None else torch.from_numpy(weights),
            labels=torch.from_numpy(np.ascontiguousarray(labels)),
            label_keys=self.keys.labels,
        )


def _put(source: np.ndarray, where: np.ndarray | slice, out: np.ndarray) -> None:
    if isinstance(where, slice):
        out[...] = source[where]
    else:
        _gather(source, where, out=out)


def make_batch(
    dense: Mapping[str, np.ndarray], sparse: Mapping[str, SparseColumn], labels: Mapping[str, np.ndarray]
) -> Batch:
    """A Batch from per-feature columns of equal row count, keys in the mappings' order.

    Rows that any sparse column's ``keep`` mask marks False (``drop_empty``) are dropped from every column.
    """
    return Block.of(dense, sparse, labels).batch()


def _row_count(dense: Mapping[str, np.ndarray], sparse: Mapping[str, SparseColumn],
               labels: Mapping[str, np.ndarray]) -> int:  # fmt: skip
    counts = {f"dense {k!r}": len(v) for k, v in dense.items()}
    counts |= {f"sparse {k!r}": len(v) for k, v in sparse.items()}
    counts |= {f"label {k!r}": len(v) for k, v in labels.items()}
    if not counts:
        raise ConfigError("make_batch got no columns; pass at least one dense, sparse or label column")
    if len(set(counts.values())) > 1:
        found = ", ".join(f"{name}: {n}" for name, n in counts.items())
        raise ConfigError(f"make_batch columns differ in row count ({found}); every column must have the same rows")
    for name, column in [*dense.items(), *labels.items()]:
        if np.ndim(column) != 1:
            raise ConfigError(
                f"make_batch column {name!r} has shape {np.shape(column)}; dense and label columns are 1-D, one per row"
            )
    return next(iter(counts.values()))


def _matrix(columns: Mapping[str, np.ndarray], rows: int) -> np.ndarray:
    if not columns:
        return np.empty((rows, 0), dtype=np.float32)
    return np.stack([np.asarray(c, dtype=np.float32) for c in columns.values()], axis=1)
