"""Block: the loader's slices, concatenations and gathered batches equal batches built row by row."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.block import Block
from ingest.transforms import SparseColumn


def random_columns(rng: np.random.Generator, rows: int):
    """Two dense, one label, a sparse key with empty lists and a weighted key; rows with an empty ``topics``
    list are marked for dropping (drop_empty)."""
    lists = [list(rng.integers(0, 1000, rng.integers(0, 4))) for _ in range(rows)]
    weighted = [list(rng.integers(0, 50, rng.integers(1, 3))) for _ in range(rows)]
    weights = [list(rng.random(len(ids)).astype(np.float32)) for ids in weighted]
    dense = {"a": rng.random(rows), "b": rng.random(rows).astype(np.float32)}
    labels = {"click": rng.integers(0, 2, rows)}
    return dense, lists, weighted, weights, labels


def column(lists, weights=None, keep=False) -> SparseColumn:
    values = np.array([i for row in lists for i in row], dtype=np.int64)
    flat = None if weights is None else np.array([w for row in weights for w in row], dtype=np.float32)
    lengths = np.array([len(r) for r in lists], dtype=np.int32)
    return SparseColumn(values, lengths, flat, lengths > 0 if keep else None)


def reference(columns, rows) -> dict[str, np.ndarray]:
    """The batch of the chosen rows, built row by row in Python: rows with an empty ``topics`` list dropped,
    sparse keys key-major, unweighted ids weighing 1."""
    dense, lists, weighted, weights, labels = columns
    kept = [r for r in rows if lists[r]]
    return {
        "dense": np.array([[dense["a"][r], dense["b"][r]] for r in kept], dtype=np.float32).reshape(len(kept), 2),
        "values": np.array([i for r in kept for i in lists[r]] + [i for r in kept for i in weighted[r]], np.int64),
        "lengths": np.array([len(lists[r]) for r in kept] + [len(weighted[r]) for r in kept], np.int32),
        "weights": np.array([1.0 for r in kept for _ in lists[r]] + [w for r in kept for w in weights[r]], np.float32),
        "labels": np.array([[labels["click"][r]] for r in kept], dtype=np.float32).reshape(len(kept), 1),
    }


def block_of(columns) -> Block:
    dense, lists, weighted, weights, labels = columns
    return Block.of(dense, {"topics": column(lists, keep=True), "regions": column(weighted, weights)}, labels)


def assert_same(got, want: dict[str, np.ndarray]) -> None:
    for name, expected in want.items():
        tensor = getattr(got, name)
        assert tensor.numpy().dtype == expected.dtype and tuple(tensor.shape) == expected.shape, name
        assert bool((tensor.numpy() == expected).all()), name
    assert (got.dense_keys, got.sparse_keys, got.label_keys) == (("a", "b"), ("topics", "regions"), ("click",))


@pytest.mark.parametrize("seed", range(8))
def test_a_shuffled_window_cut_from_two_blocks_gives_the_row_by_row_batches(seed):
    rng = np.random.default_rng(seed)
    first, second = random_columns(rng, 70), random_columns(rng, 50)
    both = tuple(
        {k: np.concatenate([x[k], y[k]]) for k in x} if isinstance(x, dict) else x + y
        for x, y in zip(first, second, strict=True)
    )
    window = Block.concat([block_of(first).slice(20, 70), block_of(second).slice(0, 30)])  # rows 20..99 of both
    assert len(window) == 80
    order = rng.permutation(80)
    for start in range(0, 80, 32):
        rows = order[start : start + 32]
        assert_same(window.batch(rows), reference(both, rows + 20))
    assert_same(window.slice(10, 40).batch(), reference(both, np.arange(30, 60)))


def test_a_block_without_sparse_keys_or_drops_batches_whole():
    block = Block.of({"x": np.arange(5.0)}, {}, {"click": np.ones(5)})
    batch = block.slice(1, 4).batch()
    assert batch.dense.tolist() == [[1.0], [2.0], [3.0]] and batch.values.shape == (0,) and batch.weights is None
    assert block.batch(np.array([4, 0])).labels.tolist() == [[1.0], [1.0]]
