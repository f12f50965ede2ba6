"""The reader's per-row-group and per-batch work as compiled loops (numba): hash, truncate, offsets, the gathers
of a batch's rows and the dense transforms, each one pass over the data for all the features at once.

Why compiled: numpy runs each transform as its own pass over memory, and several of its kernels (integer
remainder, cumsum, clip, isnan, the float64 to float32 transpose) are fast only with AVX-512. These loops
are plain LLVM for the CPU they run on (AVX2 is enough), release the GIL (``nogil``) so the read-ahead
thread and the batching thread overlap, and give the same bits as the numpy they replace
(tests/ingest/test_kernels.py compares each with a numpy reference). ``log1p`` stays torch's (MKL's vector
math in this torch build): LLVM's log1p (numba's) differs from it in the last bit of 1 float64 in 12, numpy's
of 1 in 30 (1M lognormal values; none of them after the cast to float32, but that is luck, not a bound).

Compiling: each kernel is compiled on its first call and cached on disk (``cache=True``, in
``__pycache__`` next to this file, keyed by the CPU), so only the first process on a machine pays
the compile; :func:`warm_up` makes every kernel ready for the types the reader passes, and the
:class:`ingest.job_reader.Converter` calls it when a reader is made, so no training step pays it.

Arrow columns are read in place: the kernels take the address of each column's buffers (an int64
array of addresses; the numpy views of the buffers, which keep them alive, are held by the caller
during the call), so one call covers every feature of a row group without a copy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from schemas.errors import ConfigError

_JIT = {"nogil": True, "cache": True}

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S1, _S27, _S30, _S31, _S32 = np.uint64(1), np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)

NO_HASH, HASH_PLAIN, HASH_MASK, HASH_MAGIC = -1, 0, 1, 2  # no hash; splitmix64 alone; % n as & (n - 1); % n by a magic
NO_LIMIT = np.iinfo(np.int64).max  # a truncate that cuts nothing


# --- memory by address: a column's buffer as a numba array, without a copy ---


def _pointer_to(item: types.Type):
    @intrinsic
    def at(typingctx, address):
        signature = types.CPointer(item)(types.int64)

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

        return signature, codegen

    return at


@intrinsic
def _memcpy(typingctx, destination, source, nbytes):
    """Copy ``nbytes`` from address ``source`` to address ``destination`` (2x faster than a numba loop or slice
    copy, whose every index is checked for being negative)."""
    signature = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        byte = ir.IntType(8).as_pointer()
        to, of = builder.inttoptr(args[0], byte), builder.inttoptr(args[1], byte)
        cgutils.raw_memcpy(builder, to, of, args[2], 1)
        return context.get_dummy_value()

    return signature, codegen


_i64_at, _i32_at = _pointer_to(types.int64), _pointer_to(types.int32)
_f32_at, _f64_at, _u8_at = _pointer_to(types.float32), _pointer_to(types.float64), _pointer_to(types.uint8)


def address(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first element (0 for None): what the kernels read from."""
    if array is None:
        return 0
    if not array.flags.c_contiguous:
        raise ConfigError("the kernels read contiguous arrays only; pass np.ascontiguousarray(a)")
    return array.__array_interface__["data"][0]


# --- splitmix64 and its remainder ---


@nb.njit(inline="always")
def _mix(z):
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@nb.njit(inline="always")
def _mulhi(a, b):
    """The high 64 bits of the 128-bit product of two uint64 (from 32-bit halves)."""
    a_lo, a_hi, b_lo, b_hi = a & _LOW32, a >> _S32, b & _LOW32, b >> _S32
    lo_lo, hi_lo, lo_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi
    cross = (lo_lo >> _S32) + (hi_lo & _LOW32) + lo_hi
    return (hi_lo >> _S32) + (cross >> _S32) + a_hi * b_hi


@nb.njit(**_JIT)
def _hash(ids, out, kind, divisor, magic, shift):
    """``out[i] = splitmix64(ids[i]) % n`` (uint64; ``out`` may be ``ids``); ``divisor`` is n - 1 for HASH_MASK,
    n for HASH_MAGIC. One vectorized loop (AVX2 multiplies 64-bit lanes from 32-bit halves).

    The remainder divides by multiplying (Granlund and Montgomery's round-up method, Hacker's Delight
    10-8): q = (t + ((z - t) >> 1)) >> shift with t = mulhi(magic, z), exact for every uint64 z.
    """
    if kind == HASH_MAGIC:
        for i in range(len(ids)):
            h = _mix(ids[i])
            t = _mulhi(magic, h)
            out[i] = h - ((t + ((h - t) >> _S1)) >> shift) * divisor
    elif kind == HASH_MASK:
        for i in range(len(ids)):
            out[i] = _mix(ids[i]) & divisor
    else:
        for i in range(len(ids)):
            out[i] = _mix(ids[i])


@functools.cache
def divisor(buckets: int | None) -> tuple[int, np.uint64, np.uint64, np.uint64]:
    """(kind, divisor, magic, shift) of ``% buckets`` for the kernels (None: no remainder)."""
    if buckets is None:
        return HASH_PLAIN, np.uint64(0), np.uint64(0), np.uint64(0)
    if not 1 <= buckets < 2**64:
        raise ConfigError(f"hash buckets {buckets} must be in [1, 2**64)")
    if buckets & (buckets - 1) == 0:
        return HASH_MASK, np.uint64(buckets - 1), np.uint64(0), np.uint64(0)
    bits = (buckets - 1).bit_length()  # ceil(log2(buckets)), >= 2 here
    magic = (2**64 * (2**bits - buckets)) // buckets + 1
    return HASH_MAGIC, np.uint64(buckets), np.uint64(magic), np.uint64(bits - 1)


def splitmix64(ids: np.ndarray, buckets: int | None = None) -> np.ndarray:
    """The splitmix64 finalizer of each id's 64 bits (a new uint64 array), ``% buckets`` when given."""
    z = np.array(ids, dtype=np.int64).view(np.uint64)
    _hash(z, z, *divisor(buckets))
    return z


# --- sparse features of a row group: truncate, hash, offsets and drop_empty marks, every key in one call ---


@nb.njit(inline="always")
def _limited(offsets, limit, out_offsets, start, drop, keep):
    """Row r's length after truncating to ``limit``, written as running offsets from ``start``; the end."""
    total = start
    for r in range(len(offsets) - 1):
        out_offsets[r] = total
        n = min(offsets[r + 1] - offsets[r], limit)
        total += n
        if drop and n == 0:
            keep[r] = False
    out_offsets[len(offsets) - 1] = total
    return total


@nb.njit(inline="always")
def _copy_rows(offsets, values, weights, out_offsets, out_values, out_weights, weighted):
    """Each row's first ids (as many as ``out_offsets`` gives it), and their weights."""
    for r in range(len(offsets) - 1):
        start, out = offsets[r], out_offsets[r]
        for j in range(out_offsets[r + 1] - out):
            out_values[out + j] = values[start + j]
        if weighted:
            for j in range(out_offsets[r + 1] - out):
                out_weights[out + j] = weights[start + j]


@nb.njit(inline="always")
def _key(offsets, values_at, weights_at, out_offsets, out_values, out_weights, kind, divisor, magic, shift):
    """One key's ids into ``out_values`` where ``out_offsets`` puts them: cut, hashed, weights alongside."""
    rows = len(offsets) - 1
    first, end = offsets[0], offsets[rows]
    weighted = weights_at != 0
    values = nb.carray(_i64_at(values_at), end)
    weights = nb.carray(_f32_at(weights_at), end if weighted else 0)
    out = out_values[out_offsets[0] : out_offsets[rows]]
    if len(out) == end - first:  # nothing cut: the ids as they are, hashed on the way
        if kind == NO_HASH:
            _memcpy(out.ctypes.data, values_at + 8 * first, 8 * (end - first))
        else:
            _hash(values[first:end].view(np.uint64), out.view(np.uint64), kind, divisor, magic, shift)
        if weighted:
            _memcpy(out_weights.ctypes.data + 4 * out_offsets[0], weights_at + 4 * first, 4 * (end - first))
    else:
        _copy_rows(offsets, values, weights, out_offsets, out_values, out_weights, weighted)
        if kind != NO_HASH:
            _hash(out.view(np.uint64), out.view(np.uint64), kind, divisor, magic, shift)
    if len(out_weights) and not weighted:
        out_weights[out_offsets[0] : out_offsets[rows]] = 1.0


@nb.njit(**_JIT)
def _sparse_keys(rows, values_at, offsets_at, wide, weights_at, limits, kinds, divisors, magics, shifts, drop):
    keys = len(values_at)
    out_offsets = np.empty((keys, rows + 1), np.int64)
    keep = np.ones(rows, np.bool_)
    total = 0
    for k in range(keys):
        if wide[k]:
            total = _limited(nb.carray(_i64_at(offsets_at[k]), rows + 1), limits[k], out_offsets[k], total, drop[k],
                             keep)  # fmt: skip
        else:
            total = _limited(nb.carray(_i32_at(offsets_at[k]), rows + 1), limits[k], out_offsets[k], total, drop[k],
                             keep)  # fmt: skip
    any_weighted = False
    for k in range(keys):
        any_weighted |= weights_at[k] != 0
    out_values = np.empty(total, np.int64)
    out_weights = np.empty(total if any_weighted else 0, np.float32)
    for k in range(keys):
        if wide[k]:
            offsets64 = nb.carray(_i64_at(offsets_at[k]), rows + 1)
            _key(offsets64, values_at[k], weights_at[k], out_offsets[k], out_values, out_weights, kinds[k], divisors[k],
                 magics[k], shifts[k])  # fmt: skip
        else:
            offsets32 = nb.carray(_i32_at(offsets_at[k]), rows + 1)
            _key(offsets32, values_at[k], weights_at[k], out_offsets[k], out_values, out_weights, kinds[k], divisors[k],
                 magics[k], shifts[k])  # fmt: skip
    return out_values, out_offsets, out_weights, keep


class SparseKey:
    """One sparse feature of a row group as the kernels read it: list offsets (int32 or int64, ``rows + 1``,
    indexing ``values``), int64 ids, optional float32 weights, and what to do to it."""

    __slots__ = ("offsets", "values", "weights", "limit", "buckets", "drop")

    def __init__(self, offsets: np.ndarray, values: np.ndarray, weights: np.ndarray | None = None, *,
                 limit: int | None = None, buckets: int | None = None, drop: bool = False) -> None:  # fmt: skip
        if offsets.dtype not in (np.int32, np.int64) or values.dtype != np.int64:
            raise ConfigError(f"offsets must be int32 or int64 and ids int64, found {offsets.dtype} and {values.dtype}")
        if weights is not None and weights.dtype != np.float32:
            raise ConfigError(f"weights must be float32, found {weights.dtype}")
        self.offsets, self.values, self.weights = offsets, values, weights
        self.limit, self.buckets, self.drop = limit, buckets, drop


def sparse_keys(keys: Sequence[SparseKey], rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Every key truncated (first ``limit`` ids of each row), hashed (``splitmix64 % buckets``) and marked
    (``drop``: rows left empty): ``(values, offsets, weights, keep)`` with all keys' ids in one array,
    key-major, row r of key k at ``values[offsets[k, r]:offsets[k, r + 1]]``; ``weights`` is None unless a key
    has them (then 1.0 for the ids of keys without); ``keep`` False where a ``drop`` key's row is empty.
    """
    for key in keys:
        if len(key.offsets) != rows + 1:
            raise ConfigError(f"a sparse key has {len(key.offsets) - 1} rows, expected {rows}; give every key "
                              "the same rows")  # fmt: skip
    hashes = [(NO_HASH, 0, 0, 0) if key.buckets is None else divisor(key.buckets) for key in keys]
    values, offsets, weights, keep = _sparse_keys(
        rows,
        np.array([address(k.values) for k in keys], np.int64),
        np.array([address(k.offsets) for k in keys], np.int64),
        np.array([k.offsets.dtype == np.int64 for k in keys], np.bool_),
        np.array([address(k.weights) for k in keys], np.int64),
        np.array([NO_LIMIT if k.limit is None else k.limit for k in keys], np.int64),
        np.array([h[0] for h in hashes], np.int64),
        np.array([h[1] for h in hashes], np.uint64),
        np.array([h[2] for h in hashes], np.uint64),
        np.array([h[3] for h in hashes], np.uint64),
        np.array([k.drop for k in keys], np.bool_),
    )
    return values, offsets, weights if any(k.weights is not None for k in keys) else None, keep


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """int64[n + 1]: 0, then the running sum of ``lengths``."""
    return _offsets_of(np.ascontiguousarray(lengths, dtype=np.int64))


@nb.njit(**_JIT)
def _offsets_of(lengths):
    out = np.empty(len(lengths) + 1, np.int64)
    total = 0
    out[0] = 0
    for i in range(len(lengths)):
        total += lengths[i]
        out[i + 1] = total
    return out


# --- a window: the rows of several blocks' slices, sparse ids made contiguous again ---


@nb.njit(**_JIT)
def _concat(values_at, weights_at, offsets, bounds, weighted):
    keys, parts = offsets.shape[0], len(bounds) - 1
    rows = offsets.shape[1] - parts
    total = 0
    for k in range(keys):
        for p in range(parts):
            total += offsets[k, bounds[p + 1] - 1] - offsets[k, bounds[p]]
    out_values = np.empty(total, np.int64)
    out_weights = np.empty(total if weighted else 0, np.float32)
    out_offsets = np.empty((keys, rows + 1), np.int64)
    at = 0
    for k in range(keys):
        row = 0
        for p in range(parts):
            first, last = bounds[p], bounds[p + 1] - 1
            base, end = offsets[k, first], offsets[k, last]
            for r in range(last - first):
                out_offsets[k, row + r] = at + offsets[k, first + r] - base
            row += last - first
            _memcpy(out_values.ctypes.data + 8 * at, values_at[p] + 8 * base, 8 * (end - base))
            if weighted:
                _memcpy(out_weights.ctypes.data + 4 * at, weights_at[p] + 4 * base, 4 * (end - base))
            at += end - base
        out_offsets[k, rows] = at
    return out_values, out_offsets, out_weights


def concat(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | None]]) -> tuple:
    """``(values, offsets[K, n_p + 1], weights)`` of several blocks' rows (all weighted or none) as one:
    ``(values, offsets[K, sum n_p + 1], weights)``, every key's ids contiguous, key-major."""
    weighted = parts[0][2] is not None
    widths = np.array([0] + [offsets.shape[1] for _v, offsets, _w in parts], np.int64)
    values, offsets, weights = _concat(
        np.array([address(v) for v, _o, _w in parts], np.int64),
        np.array([address(w) for _v, _o, w in parts], np.int64),
        np.concatenate([offsets for _v, offsets, _w in parts], axis=1),
        np.cumsum(widths),
        weighted,
    )
    return values, offsets, weights if weighted else None


# --- a batch: its rows gathered from a window, every key in one pass ---


@nb.njit(**_JIT)
def _gather(values, offsets, weights, weighted, rows, dense, labels):
    """Where each (key, row) list starts and how long it is first, in one pass of independent loads (the
    CPU overlaps their cache misses), then the copies: 1.2x faster than copying as they are found."""
    keys, batch = offsets.shape[0], len(rows)
    starts = np.empty(keys * batch, np.int64)
    lengths = np.empty(keys * batch, np.int32)
    total = 0
    for k in range(keys):
        for i in range(batch):
            start = offsets[k, rows[i]]
            n = offsets[k, rows[i] + 1] - start
            starts[k * batch + i] = start
            lengths[k * batch + i] = n
            total += n
    out_values = np.empty(total, np.int64)
    out_weights = np.empty(total if weighted else 0, np.float32)
    at = 0
    for j in range(keys * batch):
        start, n = starts[j], lengths[j]
        for m in range(n):
            out_values[at + m] = values[start + m]
        if weighted:
            for m in range(n):
                out_weights[at + m] = weights[start + m]
        at += n
    out_dense = np.empty((batch, dense.shape[1]), np.float32)
    out_labels = np.empty((batch, labels.shape[1]), np.float32)
    for i in range(batch):
        r = rows[i]
        for c in range(dense.shape[1]):
            out_dense[i, c] = dense[r, c]
        for c in range(labels.shape[1]):
            out_labels[i, c] = labels[r, c]
    return out_values, lengths, out_weights, out_dense, out_labels


_NO_WEIGHTS = np.empty(0, np.float32)


def gather(values: np.ndarray, offsets: np.ndarray, weights: np.ndarray | None, rows: np.ndarray, dense: np.ndarray,
           labels: np.ndarray) -> tuple:  # fmt: skip
    """Rows ``rows`` of a block (ids by ``offsets[K, n + 1]``, dense float32[n, D], labels float32[n, L]):
    ``(values, lengths int32[K * B], weights or None, dense[B, D], labels[B, L])``, keys key-major.
    ``rows`` must be in range (they are the block's own)."""
    weighted = weights is not None
    out = _gather(values, offsets, _NO_WEIGHTS if weights is None else weights, weighted,
                  np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(dense),
                  np.ascontiguousarray(labels))  # fmt: skip
    return out[0], out[1], out[2] if weighted else None, out[3], out[4]


# --- dense transforms ---

CLAMP, STANDARDIZE = 0, 1  # an op's code in a program: float64[m, 3] rows of (code, a, b)


@nb.njit(inline="always")
def _run(v, program):
    for op in range(program.shape[0]):
        if program[op, 0] == CLAMP:
            if v < program[op, 1]:
                v = program[op, 1]
            if v > program[op, 2]:
                v = program[op, 2]
        else:
            v = (v - program[op, 1]) / program[op, 2]
    return v


@nb.njit(inline="always")
def _read_column(data, valid_at, bit, program, out, check_log1p):
    """One column through ``program``: a missing value (null or NaN) as NaN; how many values are <= -1."""
    bad = 0
    valid = nb.carray(_u8_at(valid_at), (bit + len(out) + 7) // 8 if valid_at else 0)
    for r in range(len(out)):
        v = np.float64(data[r])
        if v != v or (valid_at != 0 and not (valid[(bit + r) >> 3] >> ((bit + r) & 7)) & 1):
            out[r] = np.nan
            continue
        v = _run(v, program)
        if check_log1p and v <= -1.0:
            bad += 1
        out[r] = v
    return bad


@nb.njit(**_JIT)
def _dense_first(rows, data_at, wide, valid_at, bits, program, check_log1p):
    columns = len(data_at)
    out = np.empty((columns, rows), np.float64)
    bad = 0
    for c in range(columns):
        if wide[c]:
            data = nb.carray(_f64_at(data_at[c]), rows)
            bad += _read_column(data, valid_at[c], bits[c], program, out[c], check_log1p)
        else:
            data = nb.carray(_f32_at(data_at[c]), rows)
            bad += _read_column(data, valid_at[c], bits[c], program, out[c], check_log1p)
    return out, bad


@nb.njit(**_JIT)
def _dense_step(x, program, check_log1p):
    """``program`` on each value of ``x`` (C, n) in place, NaN (missing) left; how many are <= -1."""
    bad = 0
    for c in range(x.shape[0]):
        for r in range(x.shape[1]):
            v = x[c, r]
            if v == v:
                v = _run(v, program)
                if check_log1p and v <= -1.0:
                    bad += 1
                x[c, r] = v
    return bad


@nb.njit(**_JIT)
def _dense_last(x, program, missing):
    """float32[n, C]: ``program`` on each value of ``x`` (C, n), NaN (missing) as ``missing``."""
    columns, rows = x.shape
    out = np.empty((rows, columns), np.float32)
    step = 256  # rows at a time: the columns' runs of them stay in L1 while the transpose writes
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        for c in range(columns):
            for r in range(start, stop):
                v = x[c, r]
                out[r, c] = np.float32(missing if v != v else _run(v, program))
    return out


def dense_columns(columns: Sequence[tuple[np.ndarray, np.ndarray | None, int]], rows: int,
                  programs: Sequence[np.ndarray], missing: float, log1p) -> tuple[np.ndarray, int]:  # fmt: skip
    """Dense columns through ``programs`` with ``log1p`` (in place on float64[C, n]) between each two:
    float32[n, C], missing values as ``missing``. A column is ``(data, validity bitmap or None, its bit
    offset)`` with float32 or float64 ``data``. Returns the matrix and how many values reached a log1p at
    <= -1 (the matrix is not finished when that is above 0).
    """
    data_at = np.array([address(d) for d, _v, _b in columns], np.int64)
    wide = np.array([d.dtype == np.float64 for d, _v, _b in columns], np.bool_)
    valid_at = np.array([address(v) for _d, v, _b in columns], np.int64)
    bits = np.array([b for _d, _v, b in columns], np.int64)
    x, bad = _dense_first(rows, data_at, wide, valid_at, bits, programs[0], len(programs) > 1)
    for i, program in enumerate(programs[1:-1], start=1):
        if bad:
            return x, bad
        log1p(x)
        bad = _dense_step(x, program, i + 1 < len(programs))
    if bad:
        return x, bad
    if len(programs) > 1:
        log1p(x)
        return _dense_last(x, programs[-1], missing), 0
    return _dense_last(x, _NO_PROGRAM, missing), 0


_NO_PROGRAM = np.empty((0, 3), np.float64)


# --- compiling ahead of the first batch ---

_warm = False


def warm_up() -> None:
    """Compile every kernel for the types the reader passes (or load it from the disk cache), once a process.

    Lazily compiled kernels would pay this in the first training step instead: 6-7 s of CPU on a fresh machine
    (or after this file changes), 0.4 s from the cache.
    """
    global _warm
    if _warm:
        return
    splitmix64(np.arange(3, dtype=np.int64), 7)
    offsets = np.array([0, 2, 2, 3], np.int32)
    plain = SparseKey(offsets, np.arange(3, dtype=np.int64), limit=1, buckets=7, drop=True)
    weighted = SparseKey(offsets.astype(np.int64), np.arange(3, dtype=np.int64), np.ones(3, np.float32))
    dense, labels = np.zeros((3, 2), np.float32), np.zeros((3, 1), np.float32)
    for keys in ([plain], [plain, weighted]):
        values, offsets, weights, _keep = sparse_keys(keys, 3)
        whole = concat([(values, offsets[:, :2], weights), (values, offsets[:, 1:], weights)])
        gather(*whole, np.array([2, 0]), dense, labels)  # offsets contiguous
        gather(values, offsets[:, 1:], weights, np.array([1, 0]), dense[1:], labels[1:])  # offsets a slice
    offsets_of(np.ones(2, np.int32))
    column = (np.array([0.5, np.nan, 2.0]), np.array([0b101], np.uint8), 0)
    narrow = (np.array([0.5, 1.0, 2.0], np.float32), None, 0)
    step = np.array([[CLAMP, 0.0, 1.0], [STANDARDIZE, 0.0, 2.0]])
    dense_columns([column, narrow], 3, (step,), 0.0, lambda x: None)
    dense_columns([column, narrow], 3, (step, step, step), 0.0, lambda x: None)
    _warm = True
