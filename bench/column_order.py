"""Benchmark: feature columns ordered by popularity against registry order, for the demo's jobs.

    .venv/bin/python -m bench.column_order                      # 200k rows of the ads schema, 10 ms a request
    .venv/bin/python -m bench.column_order --rows 500000 --latency-ms 20

Meta's storage findings (ISCA 2022): a job reads a small share of a table's features, and the
popular ones are read together, so storing them next to each other turns many small reads into a
few large ones. Here the same rows of the ``ads`` schema (91 features: 66 dense, 23 sparse, 2
weighted sparse; synthetic values of the registry's types) are written twice as Delta tables
(``deltalake``, snappy, row groups of 65,536 rows): once with the feature columns in registry
order, once ordered by popularity: how many distinct jobs read each feature, as the catalog's
``feature_popularity`` view counts it once the demo's jobs (``jobs/ctr_demo.yaml``,
``jobs/ctr_context.yaml``) have run; ties keep registry order.

For each job and each layout, every file's job columns are read with pyarrow:

* **coalesced**: ``pq.ParquetFile(pre_buffer=True)``, pyarrow's range coalescing (column chunks
  less than 8 KiB apart are merged into one request, up to 32 MiB);
* **per chunk**: ``pre_buffer=False``, one request per column chunk, as featurehouse's reader
  reads today (``ingest/projected_reads.py``).

Counted: read requests after the footer and bytes read, through a file wrapper; and the read
time with ``--latency-ms`` added to every request (a sleep, standing in for object storage's
first-byte latency; requests here run one after another, so on a store read concurrently the
gain would be smaller). The read time without added latency is printed too.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import CountedFile, figure, ratio, rounds, say

REPO = Path(__file__).resolve().parent.parent

JOBS = ("jobs/ctr_demo.yaml", "jobs/ctr_context.yaml")
ROW_GROUP = 65_536


def popularity(registry, jobs=JOBS) -> dict[str, int]:
    """Distinct jobs reading each feature of ``registry``'s dataset (the catalog's feature_popularity)."""
    from ingest.spec import load_spec

    counts = dict.fromkeys(registry.by_name, 0)
    for job in jobs:
        spec, _ = load_spec(REPO / job)
        for feature in spec.features:
            counts[feature.name] += 1
    return counts


def synthetic(registry, rows: int, seed: int = 7) -> dict[str, pa.Array]:
    """Columns of the registry's types: dense lognormal (8% nulls), sparse Zipf ids (Poisson 5 long)."""
    from schemas.registry import Kind

    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {}
    for f in registry.features:
        if f.kind is Kind.DENSE:
            columns[f.name] = pa.array(rng.lognormal(0, 1, rows).astype(f.dtype.value), mask=rng.random(rows) < 0.08)
            continue
        lengths = rng.poisson(5, rows).astype(np.int32)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        ids = pa.array(rng.zipf(1.3, int(lengths.sum())).astype(np.int64) % 10_000_000)
        if f.kind is Kind.SPARSE:
            columns[f.name] = pa.ListArray.from_arrays(offsets, ids)
        else:
            weights = pa.array(rng.random(len(ids)).astype(np.float32))
            columns[f.name] = pa.ListArray.from_arrays(offsets, pa.StructArray.from_arrays([ids, weights], ["id", "weight"]))
    return columns


def build(path: Path, columns: dict[str, pa.Array], order: list[str], rows: int) -> None:
    from deltalake import WriterProperties, write_deltalake

    if (path / "_delta_log").exists():
        return
    keys = {"impression_id": pa.array([f"i{i}" for i in range(rows)]),
            "label_click": pa.array(np.zeros(rows, dtype=np.int32))}  # fmt: skip
    table = pa.table({**keys, **{name: columns[name] for name in order}, "ds": pa.array(["2026-11-01"] * rows)})
    write_deltalake(str(path), table, partition_by=["ds"], writer_properties=WriterProperties(
        compression="SNAPPY", max_row_group_size=ROW_GROUP), target_file_size=1 << 40)  # fmt: skip


def read_job(files: list[str], columns: list[str], *, coalesce: bool, latency: float) -> dict:
    requests = bytes_ = 0
    began = time.perf_counter()
    for file in files:
        handle = CountedFile(file, latency)
        parquet = pq.ParquetFile(handle, pre_buffer=coalesce)
        footer = handle.requests
        for group in range(parquet.metadata.num_row_groups):
            parquet.read_row_group(group, columns=columns, use_threads=False)
        requests, bytes_ = requests + handle.requests - footer, bytes_ + handle.bytes
        handle.close()
    return {"seconds": time.perf_counter() - began, "requests": requests, "bytes": bytes_}


class JobRead:
    """:func:`read_job` of one job's columns from one layout's files, for :func:`common.rounds`."""

    def __init__(self, files: list[str], columns: list[str], *, coalesce: bool, latency: float) -> None:
        self.files, self.columns, self.coalesce, self.latency = files, columns, coalesce, latency

    def __call__(self) -> dict:
        return read_job(self.files, self.columns, coalesce=self.coalesce, latency=self.latency)


def section(work: Path, *, rows: int = 200_000, latency_ms: float = 10.0, runs: int = 3) -> dict:
    from deltalake import DeltaTable

    from ingest.spec import load_spec
    from schemas.registry import load_dataset

    registry = load_dataset("ads")
    counts = popularity(registry)
    registry_order = [f.name for f in registry.features]
    popular_order = sorted(registry_order, key=lambda n: -counts[n])  # stable: ties keep registry order
    say(f"column order: writing {rows:,} rows of the ads schema twice (registry order, popularity order)")
    columns = synthetic(registry, rows)
    layouts = {"registry order": work / f"registry_{rows}", "popularity order": work / f"popular_{rows}"}
    for (name, path), order in zip(layouts.items(), (registry_order, popular_order), strict=True):
        build(path, columns, order, rows)
    files = {name: [u.removeprefix("file://") for u in DeltaTable(str(path)).file_uris()] for name, path in layouts.items()}
    out: dict = {"rows": rows, "latency_ms": latency_ms, "row_group_rows": ROW_GROUP, "features": len(registry_order),
                 "popular_first": [n for n in popular_order if counts[n]], "jobs": {}}  # fmt: skip
    for job in JOBS:
        spec, _ = load_spec(REPO / job)
        wanted = [f.name for f in spec.features]
        contenders = {}
        for name in layouts:
            for coalesce in (True, False):
                for lat in (latency_ms / 1000, 0.0):
                    key = f"{name}, {'coalesced' if coalesce else 'per chunk'}, {'+latency' if lat else 'local'}"
                    contenders[key] = JobRead(files[name], wanted, coalesce=coalesce, latency=lat)
        runs_ = rounds(contenders, runs, label=f"column order {spec.job_id}: ")
        result = {key: {"seconds": figure(r), "requests": r[0]["requests"], "bytes": r[0]["bytes"]}
                  for key, r in runs_.items()}  # fmt: skip
        for kind in ("coalesced", "per chunk"):
            for lat in ("+latency", "local"):
                result[f"registry/popularity, {kind}, {lat}"] = ratio(runs_[f"registry order, {kind}, {lat}"],
                                                                      runs_[f"popularity order, {kind}, {lat}"])  # fmt: skip
        out["jobs"][spec.job_id] = {"features": wanted, "results": result}
    return out


def report(out: dict) -> str:
    lines = [f"Column order: {out['rows']:,} rows, {out['features']} features, row groups of {out['row_group_rows']:,}; "
             f"+latency = {out['latency_ms']:g} ms a request (median [min..max] of each time)"]  # fmt: skip
    for job, j in out["jobs"].items():
        r = j["results"]
        lines.append(f"  {job} ({len(j['features'])} features):")
        for kind in ("coalesced", "per chunk"):
            reg, pop = r[f"registry order, {kind}, +latency"], r[f"popularity order, {kind}, +latency"]
            lat_ratio = r[f"registry/popularity, {kind}, +latency"]["median"]
            loc_ratio = r[f"registry/popularity, {kind}, local"]["median"]
            lines.append(f"    {kind:<10} requests {reg['requests']:>4} registry / {pop['requests']:>4} popularity; "
                         f"with latency {reg['seconds']['median']:.3f}s / {pop['seconds']['median']:.3f}s "
                         f"= {lat_ratio:.2f}x; local {loc_ratio:.2f}x; bytes {reg['bytes']:,} / {pop['bytes']:,}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--latency-ms", type=float, default=10.0, help="added to every read request")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each figure, after one warm-up")
    parser.add_argument("--work", type=Path, default=None, help="a folder for the tables (default: a temp dir)")
    ns = parser.parse_args(argv)
    work = ns.work or Path(tempfile.mkdtemp(prefix="column_order_bench_"))
    print(report(section(work, rows=ns.rows, latency_ms=ns.latency_ms, runs=ns.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
