"""Benchmark: the reader against its peers on the same Delta table, in one run, printing ratios.

    .venv/bin/python -m bench.reader                     # 1M rows, 100 dense + 20 sparse, snappy and zstd
    .venv/bin/python -m bench.reader --rows 200000       # quicker

For each codec it builds (once, cached under --out) a Delta table written with
``deltalake`` (no Spark needed), then reads the same 10% of the features with:

  (a) the reader: snapshot, projected counted reads, transforms, shuffle, torch Batches, in the
      trainer's process (a thread reads ahead); (a2) the same with 2 DataLoader worker processes;
  (b) pyarrow alone: the same columns of the same files into numpy, no transforms (the floor),
      one thread; (b2) the same with pyarrow's threads;
  (c) pyarrow reading every column, then selecting the job's (what a non-projecting reader pays);
  (d) Petastorm's make_batch_reader into torch tensors, in its own virtual environment
      (``--petastorm-python``), or "not run" with the reason. It cannot return lists of different
      lengths, so its id lists are padded to the 32 ids the job keeps (bench/petastorm_peer.py).

Every peer runs once to warm up, then ``--repeat`` times (5 by default) in alternation (a, a2,
b, b2, c, d, a, a2, ...), so a busy moment of the machine hits every peer alike; the median run
counts. Then (a) and (b) alone, alternating the same way, at each of ``--fractions`` (1%, 10%
and 50% of the features by default). The reader's profile split is the median run's: reading
(I/O and Parquet decoding, on the read-ahead thread), shuffle (concatenating a window's row
groups and drawing its permutation), transforms, and assembly (gathering each batch's rows into
torch tensors), plus how long the consumer waited.

Targets (issue 17): (a) >= 0.7x (b) at 10% of the features for both codecs, at 200k and 1M
rows; bytes read by (a) <= 1.1x the requested columns' compressed bytes in the Parquet footers.
From issue 4: (a) >= 3x (d).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.job_reader import Converter
from ingest.loader import ResumableLoader, SnapshotDataset
from ingest.projected_reads import IoCounter
from ingest.snapshot import open_snapshot
from ingest.transforms import parse_transforms
from schemas.registry import Kind, parse_registry

REPO = Path(__file__).resolve().parent.parent

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04")
PAD = 32  # the job keeps the first 32 ids of a list; Petastorm pads its lists to the same length


def registry(dense: int, sparse: int):
    features = [{"name": f"dense_{i:03d}", "kind": "dense", "dtype": "float32", "description": "bench", "owner": "b"}
                for i in range(dense)]  # fmt: skip
    features += [{"name": f"sparse_{i:02d}", "kind": "sparse", "dtype": "int64", "default": [],
                  "description": "bench", "owner": "b"} for i in range(sparse)]  # fmt: skip
    return parse_registry({"dataset": "bench", "labels": [{"name": "click", "window": "1h"}], "features": features},
                          source="bench")  # fmt: skip


def build_table(path: Path, *, rows: int, dense: int, sparse: int, mean_length: int, codec: str) -> None:
    """Write the bench table with deltalake: 4 ds partitions, chunks of 50k rows, 8% nulls in dense columns."""
    from deltalake import WriterProperties, write_deltalake

    if (path / "_delta_log").exists():
        return
    rng = np.random.default_rng(7)
    chunk = 50_000
    props = WriterProperties(compression=codec.upper(), max_row_group_size=chunk)
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        columns = {
            "impression_id": pa.array([f"i{start + i}" for i in range(n)]),
            "label_click": pa.array((rng.random(n) < 0.03).astype(np.int32)),
        }
        for i in range(dense):
            values = rng.lognormal(0, 1, n).astype(np.float32)
            columns[f"dense_{i:03d}"] = pa.array(values, mask=rng.random(n) < 0.08)
        for i in range(sparse):
            lengths = rng.poisson(mean_length, n).astype(np.int32)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            ids = rng.zipf(1.3, int(offsets[-1])).astype(np.int64) % 10_000_000
            columns[f"sparse_{i:02d}"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))
        columns["ds"] = pa.array([DAYS[(start // chunk) % len(DAYS)]] * n)
        write_deltalake(str(path), pa.table(columns), mode="append", partition_by=["ds"], writer_properties=props)
        print(f"  built {min(start + chunk, rows):,}/{rows:,} rows of {path.name}", file=sys.stderr, flush=True)


def job_columns(reg, fraction: float) -> tuple[list[str], list[str]]:
    dense = [f.name for f in reg.of_kind(Kind.DENSE)]
    sparse = [f.name for f in reg.of_kind(Kind.SPARSE)]
    k_dense, k_sparse = max(1, round(len(dense) * fraction)), max(1, round(len(sparse) * fraction))
    return dense[:: len(dense) // k_dense][:k_dense], sparse[:: len(sparse) // k_sparse][:k_sparse]


def bench_dataset(path: Path, reg, dense: list[str], sparse: list[str], batch: int, *, buckets: int) -> SnapshotDataset:
    """The bench job over the table at ``path``: dense clamp + log1p, sparse hash + truncate, a 4-batch shuffle."""
    snapshot = open_snapshot(str(path), [dt.date.fromisoformat(d) for d in DAYS])
    converter = Converter(
        dense=tuple((n, parse_transforms(reg.by_name[n], [{"clamp": [0, 100]}, "log1p"], source="bench")) for n in dense),
        sparse=tuple((n, parse_transforms(reg.by_name[n], [{"hash": buckets}, {"truncate": PAD}], source="bench"))
                     for n in sparse),  # fmt: skip
        labels=(("click", "label_click"),),
    )
    return SnapshotDataset(snapshot, reg, [*dense, *sparse, "label_click"], batch_size=batch,
                           shuffle_buffer=4 * batch, seed=1, convert=converter)  # fmt: skip


def run_reader(path: Path, reg, dense: list[str], sparse: list[str], batch: int, *, workers: int) -> dict:
    """The reader as a trainer uses it: ResumableLoader over the snapshot, transforms, torch Batches."""
    started = time.perf_counter()  # every peer's time includes opening the snapshot (imports are warm)
    dataset = bench_dataset(path, reg, dense, sparse, batch, buckets=1_000_000)
    loader = ResumableLoader(dataset, num_workers=workers, epochs=1)  # workers are forked: nothing to re-import
    rows = sum(len(b) for b in loader)
    seconds = time.perf_counter() - started
    c: IoCounter = loader.counter
    split = (f"read {c.read_s:.2f}s (I/O {c.io_s:.2f}s), shuffle {c.shuffle_s:.2f}s, transforms {c.convert_s:.2f}s, "
             f"assembly {c.assemble_s:.2f}s, waited {c.wait_s:.2f}s")  # fmt: skip
    return {"rows": rows, "seconds": seconds, "bytes": c.bytes_read, "mode": split}


def files_of(path: Path) -> list[str]:
    snapshot = open_snapshot(str(path), [dt.date.fromisoformat(d) for d in DAYS])
    return [f.uri.removeprefix("file://") for f in snapshot.files]


def to_numpy(table: pa.Table, dense: list[str], sparse: list[str]) -> int:
    for name in dense:
        table.column(name).to_numpy()
    for name in sparse:
        column = table.column(name).combine_chunks()
        column.offsets.to_numpy(), column.values.to_numpy()
    return table.num_rows


def run_pyarrow(path: Path, dense: list[str], sparse: list[str], *, all_columns: bool, threads: bool,
                counted: bool = False) -> dict:  # fmt: skip
    """pyarrow into numpy, no transforms; ``counted``: through a file that counts the bytes read (an untimed pass)."""
    from bench.common import CountedFile

    started, rows, handles = time.perf_counter(), 0, []
    for file in files_of(path):
        if counted:
            handles.append(CountedFile(file, 0.0))
        parquet = pq.ParquetFile(handles[-1] if counted else file)
        if all_columns:
            rows += to_numpy(parquet.read(use_threads=threads).select([*dense, *sparse]), dense, sparse)
        else:
            for batch in parquet.iter_batches(batch_size=65_536, columns=[*dense, *sparse], use_threads=threads):
                rows += to_numpy(pa.Table.from_batches([batch]), dense, sparse)
    result = {"rows": rows, "seconds": time.perf_counter() - started}
    return result | ({"bytes": sum(h.bytes for h in handles)} if counted else {})


def alternating_medians(peers: dict, repeat: int) -> dict[str, dict]:
    """Each peer's median run of ``repeat``, after one warm-up run each; the runs alternate between peers."""
    runs: dict[str, list[dict]] = {key: [] for key in peers}
    for round_ in range(repeat + 1):
        for key, run in peers.items():
            result = run()
            if round_ > 0 or "not_run" in result:
                runs[key].append(result)
    return {key: sorted(rs, key=lambda r: r.get("seconds", 0.0))[len(rs) // 2] for key, rs in runs.items()}


def requested_bytes(path: Path, columns: list[str]) -> int:
    total = 0
    for file in files_of(path):
        meta = pq.read_metadata(file)
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                total += chunk.total_compressed_size if chunk.path_in_schema.split(".")[0] in columns else 0
    return total


def run_petastorm(python: str | None, path: Path, dense: list[str], sparse: list[str], batch: int) -> dict:
    if not python:
        return {"not_run": "no --petastorm-python given"}
    script = REPO / "bench" / "petastorm_peer.py"
    request = json.dumps({"files": files_of(path), "dense": dense, "sparse": sparse, "batch": batch, "pad": PAD})
    try:
        done = subprocess.run([python, str(script)], input=request, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"not_run": f"{type(err).__name__}: {err}"}
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"not_run": f"petastorm failed: {reason[:300]}"}
    return json.loads(done.stdout.strip().splitlines()[-1].removeprefix("ANSWER "))


def suite_peers(path: Path, reg, dense: list[str], sparse: list[str], batch: int, petastorm) -> dict:
    """The suite's contenders by key: (a) the reader in process, (b) the pyarrow floor, (c) pyarrow reading every
    column, (d) Petastorm where its venv is given."""
    peers = {"a": partial(run_reader, path, reg, dense, sparse, batch, workers=0),
             "b": partial(run_pyarrow, path, dense, sparse, all_columns=False, threads=False),
             "c": partial(run_pyarrow, path, dense, sparse, all_columns=True, threads=False)}  # fmt: skip
    if petastorm:
        peers["d"] = partial(petastorm, path, dense, sparse, batch)
    return peers


def fraction_figures(path: Path, dense: list[str], sparse: list[str], runs_: dict[str, list[dict]], rows: int) -> dict:
    """One share of the features' figures by peer, from its rounds: samples/s, seconds, bytes (an untimed counted
    pass for pyarrow), the reader's speed over each peer's round by round, the reader's profile."""
    from bench.common import figure, ratio

    bytes_read = {"a": runs_["a"][0]["bytes"],
                  "b": run_pyarrow(path, dense, sparse, all_columns=False, threads=False, counted=True)["bytes"],
                  "c": run_pyarrow(path, dense, sparse, all_columns=True, threads=False, counted=True)["bytes"]}
    result: dict = {"features": len(dense) + len(sparse), "requested_bytes": requested_bytes(path, [*dense, *sparse])}
    for key, r in runs_.items():
        if any("not_run" in x for x in r):
            result[key] = {"not_run": next(x["not_run"] for x in r if "not_run" in x)}
            continue
        result[key] = {"samples_per_s": figure([{"v": x["rows"] / x["seconds"]} for x in r], "v"),
                       "seconds": figure(r), "bytes": bytes_read.get(key)}  # fmt: skip
        short = [x["rows"] for x in r if x["rows"] != rows]
        if short:  # a peer that delivered fewer rows than the table has: its samples/s count what it delivered
            result[key]["warning"] = f"{len(short)} of {len(r)} runs delivered {short} rows, not {rows:,}"
        if key != "a":
            result[key]["a_speedup"] = ratio(r, runs_["a"])  # this peer's time / the reader's, round by round
    result["a"]["profile"] = sorted(runs_["a"], key=lambda x: x["seconds"])[len(runs_["a"]) // 2]["mode"]
    return result


def section(work: Path, *, rows: int = 200_000, fractions: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0), runs: int = 3,
            petastorm_python: str | None = None, codec: str = "snappy", batch: int = 8192) -> dict:  # fmt: skip
    """The reader against the floor, all columns and Petastorm at each share of the features (100 dense + 20 sparse)."""
    from bench.common import rounds, say

    reg = registry(100, 20)
    path = work / f"bench_{rows}_100_20_10_{codec}"
    say(f"reader: the bench table, {rows:,} rows ({'cached' if (path / '_delta_log').exists() else 'building'})")
    build_table(path, rows=rows, dense=100, sparse=20, mean_length=10, codec=codec)
    files_of(path)  # warm the imports (deltalake, pandas) outside every timing
    out: dict = {"rows": rows, "codec": codec, "batch": batch, "features": 120, "by_fraction": {}}
    petastorm = PetastormPeer(petastorm_python, rows) if petastorm_python else None
    if not petastorm_python:
        out["petastorm"] = "not run: no --petastorm-python (make bench makes .venv-petastorm)"
    for fraction in fractions:
        dense, sparse = job_columns(reg, fraction)
        runs_ = rounds(suite_peers(path, reg, dense, sparse, batch, petastorm), runs, label=f"reader {fraction:.0%}: ")
        out["by_fraction"][str(fraction)] = fraction_figures(path, dense, sparse, runs_, rows)
    if petastorm:
        petastorm.close()
        out["petastorm_short_reads"] = petastorm.short  # reads that delivered fewer rows, each read again
    return out


def section_report(out: dict) -> str:
    lines = [f"Reader: {out['rows']:,} rows of 100 dense + 20 sparse features ({out['codec']}), batch {out['batch']}; "
             "samples/s median [min..max]; (a)/(x) = the reader's speed over peer x's, round by round"]  # fmt: skip
    if out.get("petastorm_short_reads"):
        lines.append(f"  Petastorm delivered too few rows in {len(out['petastorm_short_reads'])} read(s) "
                     f"({out['petastorm_short_reads']} rows, not {out['rows']:,}); each was read again")  # fmt: skip
    for fraction, r in out["by_fraction"].items():
        lines.append(f"  {float(fraction):.0%} of the features ({r['features']}):")
        for key in ("a", "b", "c", "d"):
            if key not in r:
                continue
            if "not_run" in r[key]:
                lines.append(f"    ({key}) {PEERS[key]:<30} not run: {r[key]['not_run']}")
                continue
            f = r[key]["samples_per_s"]
            rel = f"  (a)/({key}) {r[key]['a_speedup']['median']:.2f}x" if key != "a" else ""
            b = r[key]["bytes"]
            warning = f"  WARNING: {r[key]['warning']}" if "warning" in r[key] else ""
            lines.append(f"    ({key}) {PEERS[key]:<30} {f['median']:>11,.0f} [{f['min']:,.0f}..{f['max']:,.0f}] samples/s"
                         f"{'' if b is None else f', {b / 2**20:,.1f} MiB read'}{rel}{warning}")  # fmt: skip
    return "\n".join(lines)


class PetastormPeer:
    """bench/petastorm_peer.py kept running in its venv for a whole section: its start (importing torch and
    petastorm, about 8 s) is paid once, not once a read; each call is one timed read."""

    def __init__(self, python: str, rows: int | None = None) -> None:
        self.rows, self.short = rows, []  # the table's rows; the row counts of reads that delivered fewer
        self.errors = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: its warnings cannot fill and block it
        self.process = subprocess.Popen([python, str(REPO / "bench" / "petastorm_peer.py")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.errors, text=True)  # fmt: skip

    def __call__(self, path: Path, dense: list[str], sparse: list[str], batch: int) -> dict:
        """One read; one delivering fewer than the table's rows is recorded in ``short`` and read again (4 times at
        most): Petastorm 0.13's make_batch_reader now and then yields no rows at all (up to 1 read in 4 here)."""
        for _ in range(5):
            result = self._read(path, dense, sparse, batch)
            if "not_run" in result or self.rows is None or result["rows"] == self.rows:
                break
            self.short.append(result["rows"])
        return result

    def _read(self, path: Path, dense: list[str], sparse: list[str], batch: int) -> dict:
        request = {"files": files_of(path), "dense": dense, "sparse": sparse, "batch": batch, "pad": PAD}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        while answer and not answer.startswith("ANSWER "):  # petastorm's own prints
            answer = self.process.stdout.readline()
        if not answer:
            self.errors.seek(0)
            reason = (self.errors.read().strip().splitlines() or ["no output"])[-1]
            return {"not_run": f"petastorm failed: {reason[:300]}"}
        return json.loads(answer.removeprefix("ANSWER "))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


PEERS = {
    "a": "reader, in process",
    "a2": "reader, 2 worker processes",
    "b": "pyarrow projected, 1 thread",
    "b2": "pyarrow projected, threads",
    "c": "pyarrow all columns",
    "d": "petastorm",
}


def script_peers(path: Path, reg, dense: list[str], sparse: list[str], ns: argparse.Namespace) -> dict:
    """The script's contenders by key (see the module's doc): (a), (a2), (b), (b2), (c), (d)."""
    return {
        "a": partial(run_reader, path, reg, dense, sparse, ns.batch_size, workers=0),
        "a2": partial(run_reader, path, reg, dense, sparse, ns.batch_size, workers=2),
        "b": partial(run_pyarrow, path, dense, sparse, all_columns=False, threads=False),
        "b2": partial(run_pyarrow, path, dense, sparse, all_columns=False, threads=True),
        "c": partial(run_pyarrow, path, dense, sparse, all_columns=True, threads=False),
        "d": partial(run_petastorm, ns.petastorm_python, path, dense, sparse, ns.batch_size),
    }


def fraction_pairs(path: Path, reg, ns: argparse.Namespace) -> dict[float, tuple[int, dict]]:
    """(a) against (b) at each of ``--fractions``: the features read and each one's median run."""
    by_fraction = {}
    for fraction in (float(f) for f in ns.fractions.split(",")):
        fd, fs = job_columns(reg, fraction)
        by_fraction[fraction] = (len(fd) + len(fs), alternating_medians({
            "a": partial(run_reader, path, reg, fd, fs, ns.batch_size, workers=0),
            "b": partial(run_pyarrow, path, fd, fs, all_columns=False, threads=False),
        }, ns.repeat))  # fmt: skip
    return by_fraction


def print_codec(codec: str, runs: dict, wanted: int, by_fraction: dict) -> None:
    print(f"\n{codec}:")
    for key, r in runs.items():
        name = f"({key}) {PEERS[key]}"
        if "not_run" in r:
            print(f"  {name:<34} not run: {r['not_run']}")
        else:
            mode = f"  [{r['mode']}]" if "mode" in r else ""
            print(f"  {name:<34} {r['rows'] / r['seconds']:>11,.0f} samples/s  ({r['rows']:,} rows, "
                  f"{r['seconds']:.2f}s){mode}")  # fmt: skip
    rate = {k: v["rows"] / v["seconds"] for k, v in runs.items() if "not_run" not in v}
    ratios = [("a", "b"), ("a", "b2"), ("a2", "b2"), ("a", "c"), ("a", "d")]
    print("  " + "   ".join(f"({x})/({y}) = {rate[x] / rate[y]:.2f}x" if y in rate else f"({x})/({y}) = n/a"
                            for x, y in ratios))  # fmt: skip
    print(f"  bytes read by (a): {runs['a']['bytes']:,} = {runs['a']['bytes'] / wanted:.3f}x the "
          f"requested columns' {wanted:,} compressed bytes")  # fmt: skip
    for fraction, (features, pair) in by_fraction.items():
        a, b = (pair[k]["rows"] / pair[k]["seconds"] for k in ("a", "b"))
        print(f"  {fraction:>5.0%} of the features ({features}): (a) {a:,.0f} samples/s, (b) {b:,.0f} samples/s, "
              f"(a)/(b) = {a / b:.2f}x  [{pair['a']['mode']}]")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dense", type=int, default=100)
    parser.add_argument("--sparse", type=int, default=20)
    parser.add_argument("--mean-length", type=int, default=10)
    parser.add_argument("--fraction", type=float, default=0.1, help="share of the features the job reads")
    parser.add_argument("--fractions", default="0.01,0.1,0.5",
                        help="shares of the features at which (a) and (b) are also compared (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--codecs", default="snappy,zstd")
    parser.add_argument("--repeat", type=int, default=5, help="runs per peer after a warm-up, alternating; the median counts")
    parser.add_argument("--out", type=Path, default=Path("/tmp/featurehouse-bench"))
    parser.add_argument("--petastorm-python", default=None, help="python of a venv with petastorm and torch")
    ns = parser.parse_args(argv)
    reg = registry(ns.dense, ns.sparse)
    dense, sparse = job_columns(reg, ns.fraction)
    print(f"job: {len(dense)} dense + {len(sparse)} sparse of {ns.dense} + {ns.sparse} features, "
          f"{ns.rows:,} rows, batch {ns.batch_size}, median of {ns.repeat} alternating runs after a warm-up")  # fmt: skip
    results = []
    for codec in ns.codecs.split(","):
        path = ns.out / f"bench_{ns.rows}_{ns.dense}_{ns.sparse}_{ns.mean_length}_{codec}"
        build_table(path, rows=ns.rows, dense=ns.dense, sparse=ns.sparse, mean_length=ns.mean_length, codec=codec)
        files_of(path)  # warm the imports (deltalake, pandas) outside every timing
        runs = alternating_medians(script_peers(path, reg, dense, sparse, ns), ns.repeat)
        by_fraction = fraction_pairs(path, reg, ns)
        results.append((codec, runs, requested_bytes(path, [*dense, *sparse]), by_fraction))
    for codec, runs, wanted, by_fraction in results:
        print_codec(codec, runs, wanted, by_fraction)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
