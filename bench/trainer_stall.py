"""Benchmark: does the trainer wait for data? DLRM steps fed by the reader with 0, 1, 2 and 4 loader
workers, against the same steps on batches already in memory (the unstalled ceiling), in one run.

    .venv/bin/python bench/trainer_stall.py                        # CPU here; CUDA when present
    bench/gpu_check.sh                                             # the GPU host's check (CUDA required)

It uses bench/reader.py's table (built once under --out): 100 dense and 20 sparse features; the
job reads 10 dense (clamp, log1p) and 2 sparse (hash, truncate) features. Every configuration
trains the same fixed number of steps from the same initial weights and prints samples/s, the
stall fraction (time waiting for the next batch / time waiting plus computing) and its ratio to
the ceiling.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from reader import bench_dataset, build_table, job_columns, registry  # noqa: E402

from ingest.loader import ResumableLoader, SnapshotDataset  # noqa: E402
from trainer.model import DLRM, ModelShape  # noqa: E402
from trainer.train import pick_device, train_step  # noqa: E402

BUCKETS = 100_000


def train(batches, shape: ModelShape, device: torch.device, steps: int) -> dict:
    """``steps`` steps on ``batches`` (an endless iterator), timing waiting vs computing."""
    torch.manual_seed(0)
    model = DLRM(shape).to(device)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    wait = compute = 0.0
    samples = 0
    for _ in range(steps):
        started = time.perf_counter()
        batch = next(batches).to(device, non_blocking=True)
        began = time.perf_counter()
        train_step(model, optimizer, loss_fn, batch)
        wait, compute = wait + began - started, compute + time.perf_counter() - began
        samples += len(batch)
    return {"samples_per_s": samples / (wait + compute), "stall": wait / (wait + compute), "wait": wait,
            "compute": compute}  # fmt: skip


def from_reader(data: SnapshotDataset, workers: int, pin: bool):
    loader = ResumableLoader(data, num_workers=workers, pin_memory=pin, **({"prefetch_factor": 4} if workers else {}))
    while True:
        yield from loader


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--workers", default="0,1,2,4", help="loader worker counts to try")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--embedding-dim", type=int, default=64)
    parser.add_argument("--codec", default="snappy")
    parser.add_argument("--out", type=Path, default=Path("/tmp/featurehouse-bench"))
    ns = parser.parse_args(argv)
    device = pick_device(ns.device)
    reg = registry(100, 20)
    dense, sparse = job_columns(reg, 0.1)
    path = ns.out / f"bench_{ns.rows}_100_20_10_{ns.codec}"
    build_table(path, rows=ns.rows, dense=100, sparse=20, mean_length=10, codec=ns.codec)
    shape = ModelShape(tuple(dense), tuple(sparse), (BUCKETS,) * len(sparse), ("click",), ns.embedding_dim,
                       (512, 256), (512, 256))  # fmt: skip
    data = bench_dataset(path, reg, dense, sparse, ns.batch_size, buckets=BUCKETS)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{ns.steps} steps of batch {ns.batch_size} on {device} ({name}), DLRM dim {ns.embedding_dim}, "
          f"{len(dense)} dense + {len(sparse)} sparse features of a {ns.rows:,}-row table ({ns.codec})")  # fmt: skip
    pin = device.type == "cuda"
    memory = [b.to(device) for b in itertools.islice(from_reader(data, 0, pin), 16)]
    train(itertools.cycle(memory), shape, device, 3)  # warm-up (allocator, kernels), not counted
    ceiling = train(itertools.cycle(memory), shape, device, ns.steps)
    runs = {f"reader, {w} workers": train(from_reader(data, int(w), pin), shape, device, ns.steps)
            for w in ns.workers.split(",")}  # fmt: skip
    runs["in-memory batches (ceiling)"] = ceiling
    for label, r in runs.items():
        print(f"  {label:<30} {r['samples_per_s']:>11,.0f} samples/s  stall {r['stall']:6.1%}  "
              f"({r['samples_per_s'] / ceiling['samples_per_s']:.2f}x the ceiling; waited {r['wait']:.2f}s, "
              f"computed {r['compute']:.2f}s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
