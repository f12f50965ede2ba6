"""Transformed rows before batching: what the loader caches, shuffles and cuts into batches.

The loader converts each row group it reads once into a :class:`Block` (every
transform applied to whole columns), cuts a window's rows out of blocks, and makes
each batch by gathering its rows of the shuffled window; compiled loops over all the
features at once (ingest/kernels.py), no per-row or per-key Python. Transforms work row
by row, so converting before shuffling gives exactly the rows that converting each batch would::

    row group (pyarrow) --Converter--> Block --slice/concat--> window
        --batch(the batch's rows of the window's permutation)--> Batch (torch)

Sparse ids are kept as one :class:`Sparse` for all keys (values and per-key offsets); a
slice is a view, and a window's ids are copied once to make them contiguous again, then
once more by the gather that puts them into their batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ingest import kernels
from ingest.batch import Batch
from ingest.transforms import SparseColumn
from schemas.errors import ConfigError


@dataclass(frozen=True)
class Jagged:
    """One key's lists for n rows: row i is ``values[offsets[i]:offsets[i + 1]]``."""

    values: np.ndarray  # int64
    offsets: np.ndarray  # int64[n + 1]
    weights: np.ndarray | None = None  # float32, one per value

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class Sparse:
    """Every sparse key's lists for the same n rows, all keys' ids in one array, key-major: key k's row r is
    ``values[offsets[k, r]:offsets[k, r + 1]]``. Two keys, three rows::

        offsets = [[0, 2, 2, 3],       topics:  [7, 9]  []  [4]
                   [3, 4, 6, 7]]       regions: [1]  [2, 3]  [5]
        values  = [7, 9, 4, 1, 2, 3, 5]

    A slice of rows is a view (``offsets[:, start:stop + 1]``, its first offsets above 0); ``weights``
    (float32, one per id, 1.0 for the ids of unweighted keys) is None when no key is weighted.
    """

    values: np.ndarray  # int64
    offsets: np.ndarray  # int64[K, n + 1]
    weights: np.ndarray | None = None

    @classmethod
    def of(cls, columns: Sequence[SparseColumn], rows: int) -> Sparse:
        offsets = np.zeros((len(columns), rows + 1), np.int64)
        base = 0
        for k, column in enumerate(columns):
            offsets[k] = kernels.offsets_of(column.lengths) + base
            base += len(column.values)
        weighted = any(c.weights is not None for c in columns)
        weights = [np.ones(len(c.values), np.float32) if c.weights is None else c.weights for c in columns]
        values = [c.values for c in columns]
        return cls(
            np.concatenate(values).astype(np.int64, copy=False) if values else np.empty(0, np.int64),
            offsets,
            np.concatenate(weights).astype(np.float32, copy=False) if weighted else None,
        )

    def __getitem__(self, key: int) -> Jagged:
        """Key ``key``'s lists alone (views)."""
        offsets = self.offsets[key]
        lo, hi = int(offsets[0]), int(offsets[-1])
        weights = None if self.weights is None else self.weights[lo:hi]
        return Jagged(self.values[lo:hi], offsets - lo, weights)

    def slice(self, start: int, stop: int) -> Sparse:
        return Sparse(self.values, self.offsets[:, start : stop + 1], self.weights)

    @staticmethod
    def concat(parts: Sequence[Sparse]) -> Sparse:
        if len(parts) == 1:
            return parts[0]
        return Sparse(*kernels.concat([(p.values, p.offsets, p.weights) for p in parts]))


@dataclass(frozen=True)
class Keys:
    dense: tuple[str, ...]
    sparse: tuple[str, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """n transformed rows: ``dense`` float32[n, D], every sparse key's lists as one :class:`Sparse`
    (``block.sparse[k]``: key k's), ``labels`` float32[n, L], and ``keep`` (False where ``drop_empty``
    drops the row when it is batched)."""

    keys: Keys
    dense: np.ndarray
    sparse: Sparse
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
        keep = np.logical_and.reduce(masks) if masks else None
        return cls.of_sparse(dense_keys, dense, tuple(sparse), Sparse.of(list(sparse.values()), rows), labels, keep)

    @classmethod
    def of_sparse(
        cls, dense_keys: Sequence[str], dense: np.ndarray, sparse_keys: Sequence[str], sparse: Sparse,
        labels: Mapping[str, np.ndarray], keep: np.ndarray | None = None,
    ) -> Block:  # fmt: skip
        """A block of a dense matrix, the sparse keys' lists already in one :class:`Sparse`, and label columns."""
        rows = dense.shape[0]
        if sparse.offsets.shape != (len(sparse_keys), rows + 1) or (keep is not None and keep.shape != (rows,)):
            raise ConfigError(f"block parts differ: dense {dense.shape}, sparse offsets {sparse.offsets.shape} for "
                              f"keys {tuple(sparse_keys)}; every part must have the same rows")  # fmt: skip
        return cls(Keys(tuple(dense_keys), tuple(sparse_keys), tuple(labels)), dense, sparse, _matrix(labels, rows),
                   keep)  # fmt: skip

    def __len__(self) -> int:
        return self.dense.shape[0]

    def _with(self, dense, sparse, labels, keep) -> Block:
        return Block(self.keys, dense, sparse, labels, keep)

    def slice(self, start: int, stop: int) -> Block:
        keep = None if self.keep is None else self.keep[start:stop]
        return self._with(self.dense[start:stop], self.sparse.slice(start, stop), self.labels[start:stop], keep)

    @staticmethod
    def concat(parts: Sequence[Block]) -> Block:
        if len(parts) == 1:
            return parts[0]
        keeps = [p.keep for p in parts]
        keep = None if keeps[0] is None else np.concatenate(keeps)
        return parts[0]._with(np.concatenate([p.dense for p in parts]), Sparse.concat([p.sparse for p in parts]),
                              np.concatenate([p.labels for p in parts]), keep)  # fmt: skip

    def batch(self, rows: np.ndarray | None = None) -> Batch:
        """Rows ``rows`` (default: all, in order) as a :class:`Batch`, without those ``keep`` marks False.

        Every value is copied once, straight into its place in the batch (sparse keys key-major), by one
        compiled pass over all the keys (ingest/kernels.py).
        """
        if self.keep is not None and not self.keep.all():
            rows = np.flatnonzero(self.keep) if rows is None else rows[self.keep[rows]]
        if rows is None:
            rows = np.arange(len(self), dtype=np.int64)
        values, lengths, weights, dense, labels = kernels.gather(
            self.sparse.values, self.sparse.offsets, self.sparse.weights, rows, self.dense, self.labels
        )
        return Batch(
            dense=torch.from_numpy(dense),
            dense_keys=self.keys.dense,
            sparse_keys=self.keys.sparse,
            values=torch.from_numpy(values),
            lengths=torch.from_numpy(lengths),
            weights=None if weights is None else torch.from_numpy(weights),
            labels=torch.from_numpy(labels),
            label_keys=self.keys.labels,
        )


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
