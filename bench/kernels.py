"""Benchmark: the reader's per-row-group and per-batch work, numpy (before ingest/kernels.py) against the
compiled kernels, on the bench table's row groups already decoded, in one run, printing ratios.

    .venv/bin/python -m bench.kernels                    # 1M rows, 10% and 50% of the features
    .venv/bin/python -m bench.kernels --rows 200000      # quicker

Both contenders do what the loader does with each chunk it reads (bench/reader.py's job: dense
clamp + log1p, sparse hash + truncate 32): convert it to a block (transforms), cut 4-batch
windows out of the blocks and concatenate them (shuffle), gather each batch's rows of the
window's permutation into torch tensors (assembly). Reading and decoding are left out: the
chunks are decoded once, before any timing. The first round checks that both give the same
batches to the bit; then ``--repeat`` rounds alternate (numpy, kernels, numpy, ...), medians count,
of wall time and of CPU time (the process's: steadier than wall time on a machine others load).

To see a CPU without AVX-512 on one that has it (numpy, numba and torch each pick their own paths):

    NPY_DISABLE_CPU_FEATURES="AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR" \\
        NUMBA_CPU_NAME=haswell ATEN_CPU_CAPABILITY=avx2 .venv/bin/python -m bench.kernels
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from bench.reader import (
    PAD,
    alternating_medians,
    bench_dataset,
    build_table,
    files_of,
    job_columns,
    registry,
    run_pyarrow,
)
from ingest.batch import Batch
from ingest.block import Block, Keys
from ingest.job_reader import Converter
from ingest.loader import ResumableLoader
from ingest.memory import tune_malloc
from ingest.transforms import Clamp, Log1p, Standardize, parse_transforms

CHUNK = 12_500  # what the loader's chunks of the bench table's 50k-row row groups hold
BATCH = 8192
WINDOW = 4 * BATCH


# --- the numpy path the kernels replaced (ingest/transforms.py and ingest/block.py before them) ---

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
_CHUNK = 1 << 15


def numpy_splitmix64(ids: np.ndarray, buckets: int | None = None) -> np.ndarray:
    z = np.array(ids, dtype=np.int64).view(np.uint64)
    scratch = np.empty(min(len(z), _CHUNK), dtype=np.uint64)
    n = None if buckets is None else np.uint64(buckets)
    with np.errstate(over="ignore"):
        for start in range(0, len(z), _CHUNK):
            chunk = z[start : start + _CHUNK]
            tmp = scratch[: len(chunk)]
            chunk += _GOLDEN
            for shift, factor in zip(_SHIFTS, (_MIX1, _MIX2, None), strict=True):
                np.right_shift(chunk, shift, out=tmp)
                chunk ^= tmp
                if factor is not None:
                    chunk *= factor
            if n is not None:
                np.floor_divide(chunk, n, out=tmp)
                tmp *= n
                chunk -= tmp
    return z


def numpy_sparse(array: pa.Array, buckets: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Truncate then hash a list<int64> column without nulls: (values, int32 lengths)."""
    offsets = array.offsets.to_numpy()
    lengths = np.diff(offsets).astype(np.int32)
    values = array.values.slice(offsets[0], offsets[-1] - offsets[0]).to_numpy()
    if len(lengths) and lengths.max() > k:
        starts = np.cumsum(lengths, dtype=np.int64) - lengths
        kept = np.arange(len(values), dtype=np.int64) - np.repeat(starts, lengths) < k
        values, lengths = values[kept], np.minimum(lengths, k)
    return numpy_splitmix64(values, buckets).view(np.int64), lengths


def numpy_dense(arrays: Sequence[pa.Array], transforms: Sequence) -> np.ndarray:
    rows = len(arrays[0])
    x = np.empty((len(arrays), rows), dtype=np.float64)
    masks = []
    for i, array in enumerate(arrays):
        x[i] = pc.fill_null(array, pa.scalar(0, array.type)).to_numpy()
        if array.null_count:
            bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
            masks.append(np.unpackbits(bits, count=array.offset + rows, bitorder="little")[array.offset :] == 0)
        else:
            masks.append(np.zeros(rows, bool))
    missing = np.stack(masks)
    nan = np.isnan(x)
    if nan.any():
        x[nan] = 0.0
        missing |= nan
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


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    offsets[1:] = lengths
    torch.from_numpy(offsets).cumsum_(0)
    return offsets


def _take(source: np.ndarray, index: np.ndarray, **kwargs) -> np.ndarray:
    return np.take(source, index, mode="wrap", **kwargs)


@dataclass(frozen=True)
class NumpyJagged:
    values: np.ndarray
    offsets: np.ndarray

    def slice(self, start: int, stop: int) -> NumpyJagged:
        return NumpyJagged(self.values, self.offsets[start : stop + 1])

    @staticmethod
    def concat(parts: Sequence[NumpyJagged]) -> NumpyJagged:
        flats = [p.values[int(p.offsets[0]) : int(p.offsets[-1])] for p in parts]
        return NumpyJagged(np.concatenate(flats), _offsets(np.concatenate([np.diff(p.offsets) for p in parts])))

    def select(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = _take(self.offsets, rows), _take(self.offsets, rows + 1)
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
        torch.from_numpy(index).cumsum_(0)
        return index, lengths


@dataclass(frozen=True)
class NumpyBlock:
    keys: Keys
    dense: np.ndarray
    sparse: tuple[NumpyJagged, ...]
    labels: np.ndarray

    def __len__(self) -> int:
        return self.dense.shape[0]

    def slice(self, start: int, stop: int) -> NumpyBlock:
        return NumpyBlock(self.keys, self.dense[start:stop], tuple(j.slice(start, stop) for j in self.sparse),
                          self.labels[start:stop])  # fmt: skip

    @staticmethod
    def concat(parts: Sequence[NumpyBlock]) -> NumpyBlock:
        sparse = tuple(NumpyJagged.concat([p.sparse[k] for p in parts]) for k in range(len(parts[0].sparse)))
        return NumpyBlock(parts[0].keys, np.concatenate([p.dense for p in parts]), sparse,
                          np.concatenate([p.labels for p in parts]))  # fmt: skip

    def batch(self, rows: np.ndarray) -> Batch:
        dense, labels = _take(self.dense, rows, axis=0), _take(self.labels, rows, axis=0)
        selected = [j.select(rows) for j in self.sparse]
        sizes = np.cumsum([0] + [int(n.sum()) for _i, n in selected])
        values = np.empty(sizes[-1], np.int64)
        for k, (j, (where, _n)) in enumerate(zip(self.sparse, selected, strict=True)):
            _take(j.values, where, out=values[sizes[k] : sizes[k + 1]])
        lengths = np.concatenate([n for _i, n in selected]).astype(np.int32)
        return Batch(dense=torch.from_numpy(dense), dense_keys=self.keys.dense, sparse_keys=self.keys.sparse,
                     values=torch.from_numpy(values), lengths=torch.from_numpy(lengths), weights=None,
                     labels=torch.from_numpy(labels), label_keys=self.keys.labels)  # fmt: skip


@dataclass(frozen=True)
class NumpyConverter:
    """The old Converter around a new one's spec (picklable for worker processes)."""

    converter: Converter

    def __call__(self, table: pa.Table) -> NumpyBlock:
        return numpy_convert(self.converter, table)


def numpy_convert(converter: Converter, table: pa.Table) -> NumpyBlock:
    """The old Converter for the bench job: one dense group, sparse hash + truncate, one label."""
    [(transforms, _positions)] = converter._dense_groups
    dense = numpy_dense([table.column(n).chunk(0) for n, _ts in converter.dense], transforms)
    sparse = []
    for name, ts in converter.sparse:
        buckets, k = next(t.buckets for t in ts if t.name == "hash"), next(t.k for t in ts if t.name == "truncate")
        values, lengths = numpy_sparse(table.column(name).chunk(0), buckets, k)
        sparse.append(NumpyJagged(values, _offsets(lengths)))
    labels = np.stack([table.column(c).to_numpy().astype(np.float32) for _n, c in converter.labels], axis=1)
    keys = Keys(tuple(n for n, _ts in converter.dense), tuple(n for n, _ts in converter.sparse),
                tuple(n for n, _c in converter.labels))  # fmt: skip
    return NumpyBlock(keys, dense, tuple(sparse), labels)


# --- the loader's work over decoded chunks ---


class Clock:
    """Wall and CPU seconds (this process's, all threads) by step."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {"transforms": 0.0, "shuffle": 0.0, "assembly": 0.0}
        self.cpu = dict(self.wall)

    def __call__(self, step: str, fn: Callable, *args):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn(*args)
        self.wall[step] += time.perf_counter() - wall
        self.cpu[step] += time.process_time() - cpu
        return out


def epoch(chunks: Sequence[pa.Table], convert: Callable, batch: Callable, concat: Callable) -> tuple[dict, list]:
    """Convert every chunk, cut windows of WINDOW rows, gather batches of each window's permutation."""
    clock = Clock()
    out, pending, held = [], [], 0
    rng = np.random.default_rng(1)

    def flush(parts):
        window = clock("shuffle", concat, parts)
        order = rng.permutation(len(window))
        for lo in range(0, len(window), BATCH):
            out.append(clock("assembly", batch, window, order[lo : lo + BATCH]))

    for table in chunks:
        block = clock("transforms", convert, table)
        start = 0
        while start < len(block):
            take = min(len(block) - start, WINDOW - held)
            pending.append(block.slice(start, start + take))
            start, held = start + take, held + take
            if held == WINDOW:
                flush(pending)
                pending, held = [], 0
    if pending:
        flush(pending)
    times = {f"{step} wall": s for step, s in clock.wall.items()} | {f"{step} cpu": s for step, s in clock.cpu.items()}
    return times | {"total wall": sum(clock.wall.values()), "total cpu": sum(clock.cpu.values())}, out


def same(a: list[Batch], b: list[Batch]) -> bool:
    names = ("dense", "values", "lengths", "labels")
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and bool((x.view(torch.uint8) == y.view(torch.uint8)).all())
        if x.numel() else x.shape == y.shape
        for p, q in zip(a, b, strict=True) for x, y in ((getattr(p, n), getattr(q, n)) for n in names)
    )  # fmt: skip


def compare(chunks: list[pa.Table], converter: Converter, repeat: int) -> dict[str, dict]:
    peers = {
        "numpy": lambda: epoch(chunks, lambda t: numpy_convert(converter, t), NumpyBlock.batch, NumpyBlock.concat),
        "kernels": lambda: epoch(chunks, converter, Block.batch, Block.concat),
    }
    warm = {name: run()[1] for name, run in peers.items()}
    if not same(warm["numpy"], warm["kernels"]):
        raise SystemExit("the kernels' batches differ from numpy's")
    runs: dict[str, list[dict]] = {name: [] for name in peers}
    for _ in range(repeat):
        for name, run in peers.items():
            runs[name].append(run()[0])
    return {name: {step: float(np.median([r[step] for r in rs])) for step in rs[0]} for name, rs in runs.items()}


def run_reader(path: Path, reg, dense: list[str], sparse: list[str], *, workers: int, numpy: bool) -> dict:
    """bench/reader.py's (a): the whole reader, with the kernels or with the numpy path as its converter."""
    started = time.perf_counter()
    dataset = bench_dataset(path, reg, dense, sparse, BATCH, buckets=1_000_000)
    if numpy:
        dataset.convert = NumpyConverter(dataset.convert)
    loader = ResumableLoader(dataset, num_workers=workers, epochs=1)
    rows = sum(len(b) for b in loader)
    c = loader.counter
    split = (f"read {c.read_s:.2f}s, shuffle {c.shuffle_s:.2f}s, transforms {c.convert_s:.2f}s, "
             f"assembly {c.assemble_s:.2f}s, waited {c.wait_s:.2f}s")  # fmt: skip
    return {"rows": rows, "seconds": time.perf_counter() - started, "mode": split}


def reader_pairs(path: Path, reg, fraction: float, repeat: int, workers: int) -> None:
    """The reader with the numpy path, with the kernels, and the one-thread pyarrow floor, alternating."""
    dense, sparse = job_columns(reg, fraction)
    peers = {"reader, numpy": partial(run_reader, path, reg, dense, sparse, workers=0, numpy=True),
             "reader, kernels": partial(run_reader, path, reg, dense, sparse, workers=0, numpy=False),
             "floor (pyarrow, 1 thread)": partial(run_pyarrow, path, dense, sparse, all_columns=False, threads=False)}
    if workers:
        peers[f"reader, kernels, {workers} workers"] = partial(run_reader, path, reg, dense, sparse, workers=workers,
                                                               numpy=False)  # fmt: skip
    medians = alternating_medians(peers, repeat)
    floor = medians["floor (pyarrow, 1 thread)"]["seconds"]
    print(f"{fraction:.0%} of the features, the whole reader (median of {repeat} alternating runs after a warm-up):")
    for name, r in medians.items():
        profile = f"  [{r['mode']}]" if "mode" in r else ""
        print(f"  {name:<30} {r['rows'] / r['seconds']:>11,.0f} samples/s  {r['seconds']:.2f}s  "
              f"/floor = {floor / r['seconds']:.2f}x{profile}")  # fmt: skip


def hash_micro(repeat: int) -> dict[str, float]:
    from ingest.kernels import splitmix64

    ids = np.random.default_rng(2).integers(0, 10_000_000, 500_000, dtype=np.int64)
    times: dict[str, list[float]] = {"numpy": [], "kernels": []}
    for round_ in range(repeat + 1):
        for name, fn in (("numpy", numpy_splitmix64), ("kernels", splitmix64)):
            started = time.perf_counter()
            fn(ids, 1_000_000)
            if round_:
                times[name].append(time.perf_counter() - started)
    return {name: float(np.median(t)) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--codec", default="snappy")
    parser.add_argument("--fractions", default="0.1,0.5")
    parser.add_argument("--repeat", type=int, default=5, help="rounds after a warm-up, alternating; medians count")
    parser.add_argument("--out", type=Path, default=Path("/tmp/featurehouse-bench"))
    parser.add_argument("--reader", action="store_true",
                        help="also the whole reader (bench/reader.py's (a)) with each, against the pyarrow floor")
    parser.add_argument("--workers", type=int, default=0, help="with --reader: also the kernels' reader with workers")
    parser.add_argument("--only-reader", action="store_true", help="the whole reader alone, not the steps")
    ns = parser.parse_args(argv)
    tune_malloc()  # as the loader does
    reg = registry(100, 20)
    path = ns.out / f"bench_{ns.rows}_100_20_10_{ns.codec}"
    build_table(path, rows=ns.rows, dense=100, sparse=20, mean_length=10, codec=ns.codec)
    if ns.reader or ns.only_reader:
        for fraction in (float(f) for f in ns.fractions.split(",")):
            reader_pairs(path, reg, fraction, ns.repeat, ns.workers)
        if ns.only_reader:
            return 0
    micro = hash_micro(ns.repeat)
    print(f"splitmix64 % 1M of 500k ids: numpy {micro['numpy'] * 1e3:.2f} ms, kernels {micro['kernels'] * 1e3:.2f} ms, "
          f"numpy/kernels = {micro['numpy'] / micro['kernels']:.2f}x")  # fmt: skip
    for fraction in (float(f) for f in ns.fractions.split(",")):
        dense, sparse = job_columns(reg, fraction)
        converter = Converter(
            dense=tuple((n, parse_transforms(reg.by_name[n], [{"clamp": [0, 100]}, "log1p"], source="bench"))
                        for n in dense),  # fmt: skip
            sparse=tuple((n, parse_transforms(reg.by_name[n], [{"hash": 1_000_000}, {"truncate": PAD}], source="bench"))
                         for n in sparse),  # fmt: skip
            labels=(("click", "label_click"),),
        )
        columns = [*dense, *sparse, "label_click"]
        chunks = [pa.Table.from_batches([b]) for file in files_of(path)
                  for b in pq.ParquetFile(file).iter_batches(batch_size=CHUNK, columns=columns)]  # fmt: skip
        medians = compare(chunks, converter, ns.repeat)
        print(f"{fraction:.0%} of the features ({len(dense)} dense + {len(sparse)} sparse), {ns.rows:,} rows, "
              f"{ns.codec}: same batches to the bit; median of {ns.repeat} alternating rounds")  # fmt: skip
        for step in ("transforms", "shuffle", "assembly", "total"):
            line = []
            for clock in ("wall", "cpu"):
                n, k = medians["numpy"][f"{step} {clock}"], medians["kernels"][f"{step} {clock}"]
                line.append(f"{clock}: numpy {n:6.3f}s kernels {k:6.3f}s = {n / k:5.2f}x")
            print(f"  {step:<10} " + "   ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
