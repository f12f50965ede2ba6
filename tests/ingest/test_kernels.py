"""The compiled kernels against plain numpy references, bit for bit, on random inputs and their edges."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from ingest import kernels
from ingest.block import Block, Sparse
from ingest.job_reader import Converter
from ingest.transforms import (
    Clamp,
    DropEmpty,
    Fill,
    Hash,
    Log1p,
    Standardize,
    Truncate,
    apply_dense_columns,
    apply_sparse,
)

MASK64 = (1 << 64) - 1
EDGE_IDS = [0, 1, -1, 2**63 - 1, -(2**63), 2**32 - 1, 2**32, -(2**32)]
BUCKETS = [1, 2, 3, 7, 1000, 2**20, 2**32 - 1, 2**32 + 1, 2**40 + 15, 2**63 - 1, 2**63, 2**64 - 1]


def numpy_splitmix64(ids: np.ndarray) -> np.ndarray:
    z = ids.astype(np.int64).view(np.uint64).copy()
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def random_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    ids = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64, endpoint=True)
    ids[: len(EDGE_IDS)] = EDGE_IDS[:n]
    return ids


@pytest.mark.parametrize("buckets", [None, *BUCKETS, 999_983, 123_456_789_012])
def test_splitmix64_and_its_remainder_equal_numpys(buckets):
    ids = random_ids(np.random.default_rng(3), 10_001)
    plain = numpy_splitmix64(ids)
    expected = plain if buckets is None else np.remainder(plain, np.uint64(buckets))
    assert np.array_equal(kernels.splitmix64(ids, buckets), expected)


def test_the_remainder_by_multiplying_is_exact_at_every_edge_of_the_dividend():
    edges = np.array([0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1], np.uint64)
    rng = np.random.default_rng(4)
    for buckets in [*BUCKETS, *rng.integers(2, 2**63, 50).tolist()]:
        kind, divisor, magic, shift = kernels.divisor(int(buckets))
        z = np.concatenate([edges, edges - np.uint64(buckets % 2**64) if buckets > 8 else edges])
        expected = np.remainder(numpy_splitmix64(z.view(np.int64)), np.uint64(buckets))
        kernels._hash(z, z, kind, divisor, magic, shift)
        assert np.array_equal(z, expected), buckets


def numpy_keys(lists_by_key, weights_by_key, *, limits, buckets, drops):
    """The kernels' output built key by key, row by row."""
    values, weights, offsets, total = [], [], [], 0
    rows = len(lists_by_key[0])
    keep = np.ones(rows, bool)
    for lists, ws, limit, n, drop in zip(lists_by_key, weights_by_key, limits, buckets, drops, strict=True):
        row_offsets = [total]
        for r, ids in enumerate(lists):
            ids = ids[: limit if limit is not None else len(ids)]
            hashed = numpy_splitmix64(np.array(ids, np.int64))
            if n is not None:
                hashed = np.remainder(hashed, np.uint64(n))
            values += hashed.view(np.int64).tolist() if n is not None else ids
            weights += (ws[r][: len(ids)] if ws is not None else [1.0] * len(ids))
            total += len(ids)
            row_offsets.append(total)
            keep[r] &= not (drop and not ids)
        offsets.append(row_offsets)
    return np.array(values, np.int64), np.array(offsets, np.int64).reshape(len(lists_by_key), rows + 1), \
        np.array(weights, np.float32), keep  # fmt: skip


def random_lists(rng, rows, *, most=6):
    return [random_ids(rng, int(rng.integers(0, most + 1))).tolist() for _ in range(rows)]


@pytest.mark.parametrize("seed", range(6))
def test_sparse_keys_truncate_hash_and_mark_every_key_in_one_call(seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(0, 40))
    lists = [random_lists(rng, rows) for _ in range(4)]
    weights = [None, [rng.random(len(r)).astype(np.float32).tolist() for r in lists[1]], None, None]
    limits, buckets, drops = [2, None, 100, 1], [1000, 7, None, 2**63 - 1], [True, False, False, True]
    keys = []
    for k, key_lists in enumerate(lists):
        lengths = np.array([len(r) for r in key_lists], np.int64)
        flat = np.array([i for r in key_lists for i in r], np.int64)
        pad = int(rng.integers(0, 3))  # the lists start inside their ids, as a sliced Arrow array's do
        offsets = (np.concatenate([[0], np.cumsum(lengths)]) + pad).astype(np.int32 if k % 2 else np.int64)
        values = np.concatenate([random_ids(rng, pad), flat])
        w = None
        if weights[k] is not None:
            w = np.concatenate([np.zeros(pad), [x for r in weights[k] for x in r]]).astype(np.float32)
        keys.append(kernels.SparseKey(offsets, values, w, limit=limits[k], buckets=buckets[k], drop=drops[k]))
    values, offsets, got_weights, keep = kernels.sparse_keys(keys, rows)
    want = numpy_keys(lists, weights, limits=limits, buckets=buckets, drops=drops)
    assert np.array_equal(values, want[0]) and np.array_equal(offsets, want[1])
    assert np.array_equal(got_weights, want[2]) and np.array_equal(keep, want[3])


def test_apply_sparse_keeps_extreme_ids_and_cuts_nothing_when_k_covers_every_list():
    lists = [EDGE_IDS, [], None, [2**63 - 1, None, -(2**63)]]
    column = apply_sparse(pa.array(lists, pa.list_(pa.int64())), (Truncate(100), Hash(2**63 - 1), DropEmpty()))
    expected = [numpy_splitmix64(np.array([i for i in row if i is not None], np.int64)) % np.uint64(2**63 - 1)
                for row in lists if row]  # fmt: skip
    assert column.values.tolist() == np.concatenate(expected).tolist()
    assert column.lengths.tolist() == [8, 0, 0, 2] and column.keep.tolist() == [True, False, False, True]
    plain = apply_sparse(pa.array(lists, pa.large_list(pa.int64())).slice(3), ())
    assert plain.values.tolist() == [2**63 - 1, -(2**63)] and plain.lengths.tolist() == [2]


def sparse_of(lists_by_key, weights_by_key=None) -> Sparse:
    rows = len(lists_by_key[0]) if lists_by_key else 0
    keys = []
    for k, lists in enumerate(lists_by_key):
        weights = None if weights_by_key is None else np.array([w for r in weights_by_key[k] for w in r], np.float32)
        offsets = kernels.offsets_of(np.array([len(r) for r in lists], np.int64))
        keys.append(kernels.SparseKey(offsets, np.array([i for r in lists for i in r], np.int64), weights))
    values, offsets, weights, _keep = kernels.sparse_keys(keys, rows)
    return Sparse(values, offsets, weights)


@pytest.mark.parametrize("seed", range(6))
def test_concat_and_gather_equal_the_rows_picked_in_python(seed):
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, 30)) for _ in range(3)]
    lists = [[random_lists(rng, n, most=3) for _ in range(3)] for n in sizes]  # part, key, row
    weights = [[[rng.random(len(r)).astype(np.float32).tolist() for r in key] for key in part] for part in lists]
    parts, window = [], [[[], []] for _ in range(3)]  # key: (lists, weights) of the window's rows
    for p, n in enumerate(sizes):
        start, stop = sorted(rng.integers(0, n + 1, 2).tolist())
        parts.append(sparse_of(lists[p], weights[p]).slice(start, stop))
        for k in range(3):
            window[k][0] += lists[p][k][start:stop]
            window[k][1] += weights[p][k][start:stop]
    whole = Sparse.concat(parts)
    rows = len(window[0][0])
    assert whole.offsets.shape == (3, rows + 1)
    picked = rng.permutation(rows)[: int(rng.integers(0, rows + 1))]
    dense = rng.random((rows, 2)).astype(np.float32)
    labels = rng.random((rows, 1)).astype(np.float32)
    for offsets in (whole.offsets, np.ascontiguousarray(whole.offsets)):
        values, lengths, got_weights, got_dense, got_labels = kernels.gather(whole.values, offsets, whole.weights,
                                                                             picked, dense, labels)  # fmt: skip
        assert values.tolist() == [i for k in range(3) for r in picked for i in window[k][0][r]]
        assert got_weights.tolist() == [w for k in range(3) for r in picked for w in window[k][1][r]]
        assert lengths.tolist() == [len(window[k][0][r]) for k in range(3) for r in picked]
        assert np.array_equal(got_dense, dense[picked]) and np.array_equal(got_labels, labels[picked])


def test_a_window_without_ids_or_keys_gathers_empty():
    empty = sparse_of([[[], [], []]])
    block = Block.of_sparse(["x"], np.zeros((3, 1), np.float32), ["ids"], empty, {})
    batch = Block.concat([block.slice(0, 1), block.slice(1, 3)]).batch(np.array([2, 0]))
    assert batch.values.shape == (0,) and batch.lengths.tolist() == [0, 0] and batch.weights is None
    nothing = Sparse(np.empty(0, np.int64), np.zeros((0, 3), np.int64))
    keyless = Block.of_sparse(["x"], np.zeros((2, 1), np.float32), [], nothing, {})
    assert Block.concat([keyless.slice(0, 1), keyless.slice(1, 2)]).batch().lengths.shape == (0,)


def numpy_dense(arrays, transforms) -> np.ndarray:
    """What apply_dense_columns gave before the kernels: numpy and torch on a float64 matrix."""
    x = np.stack([a.to_numpy(zero_copy_only=False).astype(np.float64) for a in arrays])  # nulls as NaN
    missing = np.isnan(x)
    x[missing] = 0.0
    for t in transforms:
        if isinstance(t, Clamp):
            np.clip(x, t.lo, t.hi, out=x)
        elif isinstance(t, Log1p):
            torch.from_numpy(x).log1p_()
        elif isinstance(t, Standardize):
            x -= t.mean
            x /= t.stddev
    value = np.full(1, np.nan)
    for t in transforms:
        value = t(value)
    np.putmask(x, missing, value)
    return x.T.astype(np.float32, order="C")


DENSE_PROGRAMS = [
    (Clamp(0.0, 100.0), Log1p(), Fill(0.0)),
    (Fill(1.5), Clamp(-0.5, 3.0), Log1p(), Standardize(0.25, 1.75), Fill(2.0)),
    (Standardize(-1.0, 3.0), Clamp(-0.0, np.inf), Log1p(), Clamp(-np.inf, 0.5), Log1p(), Fill(-7.0)),
    (Clamp(-np.inf, 0.0), Fill(0.0)),
    (Fill(3.0),),
]


@pytest.mark.parametrize("transforms", DENSE_PROGRAMS)
@pytest.mark.parametrize("arrow_type", [pa.float32(), pa.float64()])
def test_dense_columns_are_bit_identical_to_the_numpy_path(transforms, arrow_type):
    rng = np.random.default_rng(5)
    rows = 5000
    arrays = []
    for _ in range(3):
        edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -0.9, 5e-324, -1e-30, 1e-30]
        values = np.concatenate([rng.lognormal(0, 2, 3), edges, rng.lognormal(0, 2, rows - 13) - 0.9])
        mask = rng.random(rows) < 0.1
        mask[3 : 3 + len(edges)] = False
        with np.errstate(over="ignore"):  # 1e30 is inf in float32
            array = pa.array(values.astype(arrow_type.to_pandas_dtype()), mask=mask)
        arrays.append(array.slice(3, rows - 10))  # its rows start at bit 3 of the validity bitmap
    if any(isinstance(t, Log1p) for t in transforms):  # values must be > -1 at log1p: no -inf or -0.9 - ...
        arrays = [pa.array(np.where(np.isinf(a.to_numpy(zero_copy_only=False)), 1.0, a.to_numpy(zero_copy_only=False)),
                           mask=np.asarray(a.is_null())).cast(arrow_type) for a in arrays]  # fmt: skip
    got = apply_dense_columns(arrays, transforms)
    want = numpy_dense(arrays, transforms)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_log1p_of_random_values_equals_the_old_path_to_the_bit():
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.lognormal(0, 3, 200_000), -rng.random(1000) * 0.999, [0.0, -0.0, 1e-300, np.inf]])
    arrays = [pa.array(x.astype(np.float32)), pa.array(x)]
    transforms = (Log1p(), Standardize(0.5, 3.0), Fill(0.0))
    assert np.array_equal(apply_dense_columns(arrays, transforms).view(np.uint32),
                          numpy_dense(arrays, transforms).view(np.uint32))  # fmt: skip


def test_after_warm_up_a_reader_compiles_nothing_more():
    kernels.warm_up()
    dispatchers = [v for v in vars(kernels).values() if hasattr(v, "signatures") and hasattr(v, "py_func")]
    before = {d.__name__: len(d.signatures) for d in dispatchers}
    rng = np.random.default_rng(7)
    rows = 64
    lists = random_lists(rng, rows)
    table = pa.table({
        "d": pa.array(rng.random(rows).astype(np.float32), mask=rng.random(rows) < 0.2),
        "e": pa.array(rng.random(rows)),
        "ids": pa.array(lists, pa.list_(pa.int64())),
        "w": pa.array([[{"id": i, "weight": 0.5} for i in r] for r in lists],
                      pa.list_(pa.struct([("id", pa.int64()), ("weight", pa.float32())]))),
        "label_click": rng.integers(0, 2, rows),
    })  # fmt: skip
    converter = Converter(dense=(("d", (Clamp(0.0, 1.0), Log1p(), Fill(0.0))), ("e", (Fill(0.0),))),
                          sparse=(("ids", (Hash(97), Truncate(2), DropEmpty())), ("w", (Hash(8),))),
                          labels=(("click", "label_click"),))  # fmt: skip
    first, second = converter(table), converter(table.slice(10))
    window = Block.concat([first.slice(5, 64), second.slice(0, 20)])
    window.batch(rng.permutation(len(window))[:16])
    window.slice(3, 9).batch()
    assert {d.__name__: len(d.signatures) for d in dispatchers} == before
