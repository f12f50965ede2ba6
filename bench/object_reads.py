"""Benchmark: the reader on object storage with request latency: coalesced reads x popularity order.

    .venv/bin/python -m bench.object_reads                       # 200k rows of the ads schema, 10 ms a request
    .venv/bin/python -m bench.object_reads --rows 100000 --latency-ms 20 --runs 5

The same rows of the ``ads`` schema (bench/column_order.py: 91 features of the registry's types,
snappy, row groups of 65,536 rows) are written twice, in registry order and in popularity order, and
copied into a bucket of moto's S3 server on 127.0.0.1. The reader (``SnapshotDataset``, the
ctr-demo job's columns, no transforms, no shuffle, one epoch) reads each layout through a delaying
TCP proxy in front of moto, which holds every piece of a request the client sends for
``--latency-ms`` before passing it on (an HTTP request is sent as one piece here, so each request
waits once). Requests run one after another: the read-ahead thread fetches one row group's ranges
at a time, so none overlap.

Four contenders: {registry, popularity} order x {per chunk (``read_gap: null``), coalesced (1 MiB)}.
Counted per read: the reader's requests (ranged GETs; the footers' included), moto's GETs and HEADs
of data files from its log, bytes read and bytes between coalesced chunks. The target: popularity order
coalesced at least 1.6x faster than registry order per chunk. Then the bytes-and-requests curve
against the gap, for both orders, read from local copies (no latency: the counts do not depend on it).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import threading
from pathlib import Path

from bench.column_order import JOBS, REPO, build, popularity, synthetic
from bench.common import figure, ratio, rounds, say

GAPS = (None, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
BUCKET = "featurehouse-bench"


class DelayingProxy:
    """127.0.0.1:port -> ``target``, each piece the client sends held ``delay`` seconds; a thread of its own."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port, self.delay = target_port, delay
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="delaying-proxy")
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pump(source, sink, delay: float) -> None:
            try:
                while data := await source.read(1 << 16):
                    if delay:
                        await asyncio.sleep(delay)
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pump(reader, upstream_writer, self.delay), pump(upstream_reader, writer, 0.0))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class JobRead:
    """One epoch of a job's columns through the reader, for :func:`common.rounds`: seconds, requests, bytes."""

    def __init__(self, snapshot, registry, columns: list[str], gap: int | None, log: Path | None = None,
                 max_waste: float = 0.1) -> None:  # fmt: skip
        self.snapshot, self.registry, self.columns, self.gap, self.log = snapshot, registry, columns, gap, log
        self.max_waste = max_waste

    def __call__(self) -> dict:
        import time

        from ingest.loader import ResumableLoader, SnapshotDataset
        from ingest.projected_reads import Coalescing

        before = _moto_counts(self.log)
        started = time.perf_counter()
        dataset = SnapshotDataset(self.snapshot, self.registry, self.columns, batch_size=4096,
                                  coalescing=Coalescing(gap=self.gap, max_waste=self.max_waste))  # fmt: skip
        loader = ResumableLoader(dataset, epochs=1)
        rows = sum(t.num_rows for t in loader)
        seconds = time.perf_counter() - started
        loader.close()
        after, c = _moto_counts(self.log), loader.counter
        return {"seconds": seconds, "rows": rows, "requests": c.requests, "bytes": c.bytes_read,
                "wasted": c.bytes_wasted, "moto_gets": after[0] - before[0], "moto_heads": after[1] - before[1]}  # fmt: skip


def _moto_counts(log: Path | None) -> tuple[int, int]:
    if log is None:
        return 0, 0
    text = log.read_text()
    return tuple(len(re.findall(rf'"(?:\x1b\[[0-9;]*m)*{m} /[^ ]+\.parquet HTTP', text)) for m in ("GET", "HEAD"))


def section(work: Path, *, rows: int = 200_000, latency_ms: float = 10.0, runs: int = 3) -> dict:
    import boto3

    from ingest.snapshot import open_snapshot
    from ingest.spec import load_spec
    from schemas.registry import load_dataset
    from schemas.storage import Store
    from tests.moto import KEYS, moto_server

    registry = load_dataset("ads")
    counts = popularity(registry)
    registry_order = [f.name for f in registry.features]
    popular_order = sorted(registry_order, key=lambda n: -counts[n])
    columns = synthetic(registry, rows)
    layouts = {"registry": work / f"registry_{rows}", "popularity": work / f"popular_{rows}"}
    for path, order in zip(layouts.values(), (registry_order, popular_order), strict=True):
        build(path, columns, order, rows)
    spec, _ = load_spec(REPO / JOBS[0])
    wanted = [*spec.feature_names, "label_click"]
    days = spec.days[:1]
    out: dict = {"rows": rows, "latency_ms": latency_ms, "job": spec.job_id, "columns": len(wanted), "curve": {}}
    for name, path in layouts.items():  # the curve: counts only, local files; and what the waste rule prevents
        snapshot = open_snapshot(str(path), days)
        out["curve"][name] = {str(gap): JobRead(snapshot, registry, wanted, gap)() for gap in GAPS}
        out["curve"][f"{name}, gap only"] = {str(gap): JobRead(snapshot, registry, wanted, gap, max_waste=1e9)()
                                             for gap in GAPS}  # fmt: skip
    log = work / "moto.log"
    with moto_server(log, BUCKET) as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=KEYS["access_key"], aws_secret_access_key=KEYS["secret_key"])  # fmt: skip
        for name, path in layouts.items():
            for file in path.rglob("*"):
                if file.is_file():
                    client.upload_file(str(file), BUCKET, f"{name}/{file.relative_to(path)}")
        proxy = DelayingProxy(int(endpoint.rsplit(":", 1)[1]), latency_ms / 1000)
        try:
            store = Store(warehouse=f"s3://{BUCKET}", endpoint=f"http://127.0.0.1:{proxy.port}", **KEYS)
            contenders = {}
            for name in layouts:
                snapshot = open_snapshot(f"s3://{BUCKET}/{name}", days, store=store)
                for gap, kind in ((None, "per chunk"), (1 << 20, "coalesced")):
                    contenders[f"{name} order, {kind}"] = JobRead(snapshot, registry, wanted, gap, log)
            say(f"object reads: {rows:,} rows, {len(wanted)} columns of {spec.job_id}, {latency_ms:g} ms a request")
            results = rounds(contenders, runs, label="object reads: ")
        finally:
            proxy.stop()
    out["results"] = {k: {**{m: r[0][m] for m in ("requests", "bytes", "wasted", "moto_gets", "moto_heads", "rows")},
                          "seconds": figure(r)} for k, r in results.items()}  # fmt: skip
    out["speedup"] = ratio(results["registry order, per chunk"], results["popularity order, coalesced"])
    return out


def report(out: dict) -> str:
    lines = [f"Object reads: {out['rows']:,} rows, {out['columns']} columns of {out['job']}, moto on 127.0.0.1 behind "
             f"a proxy adding {out['latency_ms']:g} ms a request (median [min..max])"]  # fmt: skip
    for key, r in out["results"].items():
        s = r["seconds"]
        lines.append(f"  {key:<28} {s['median']:.3f}s [{s['min']:.3f}..{s['max']:.3f}]  requests {r['requests']:>4} "
                     f"(moto: {r['moto_gets']} GET, {r['moto_heads']} HEAD)  bytes {r['bytes']:,} "
                     f"(between chunks {r['wasted']:,})")  # fmt: skip
    lines.append(f"  registry order per chunk / popularity order coalesced: {out['speedup']['median']:.2f}x "
                 "(target 1.6x)")  # fmt: skip
    lines.append("  bytes and requests against the gap (local files; 'gap only': without the waste rule):")
    for name, curve in out["curve"].items():
        cells = ", ".join(f"{'none' if g == 'None' else _size(int(g))}: {c['requests']} req {c['bytes'] / 1e6:.2f} MB"
                          for g, c in curve.items())  # fmt: skip
        lines.append(f"    {name:<20} {cells}")
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n else "0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--latency-ms", type=float, default=10.0, help="added to every request by the proxy")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each contender, after one warm-up")
    parser.add_argument("--work", type=Path, default=None, help="a folder for the tables (default: a temp dir)")
    ns = parser.parse_args(argv)
    work = ns.work or Path(tempfile.mkdtemp(prefix="object_reads_bench_"))
    print(report(section(work, rows=ns.rows, latency_ms=ns.latency_ms, runs=ns.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
