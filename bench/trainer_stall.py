"""Benchmark: does the trainer wait for data? DLRM steps fed by the reader with 0, 1, 2 and 4 loader
workers, against the same steps on batches already in memory (the unstalled ceiling), in one run.

    .venv/bin/python -m bench.trainer_stall                        # CPU here; CUDA when present
    .venv/bin/python -m bench.trainer_stall --job jobs/ctr_demo.yaml --home data   # the demo's job
    bench/gpu_check.sh                                             # the GPU host's check (CUDA required)

By default it uses bench/reader.py's table (built once under --out): 100 dense and 20 sparse
features; the job reads 10 dense (clamp, log1p) and 2 sparse (hash, truncate) features. With
``--job`` it trains that job's model, with its optimizer, on its own partitions of the warehouse
under ``--home`` (``make demo`` builds the demo's). Every configuration trains the same fixed
number of steps from the same initial weights and prints samples/s, the stall fraction (time
waiting for the next batch / time waiting plus computing) and its ratio to the ceiling. With 0
workers the in-process reader makes batches in a thread, 2 ahead (``ResumableLoader``'s prefetch);
"0 workers, no prefetch" makes each in the trainer's thread when asked, as before that existed.
Every run uses the same number of torch compute threads: torch's default, as ``featurehouse
train`` does, or ``--compute-threads N``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from bench.reader import bench_dataset, build_table, job_columns, registry
from ingest.job_reader import open_reader
from ingest.loader import PREFETCH, ResumableLoader, SnapshotDataset
from ingest.spec import load_spec
from trainer.model import DLRM, ModelShape, model_shape
from trainer.train import SPARSE_OPTIMIZERS, job_optimizer, pick_device, train_step

BUCKETS = 100_000


@dataclass(frozen=True)
class Setup:
    """What is trained and on what: the model's shape, its optimizer, the reader's dataset."""

    shape: ModelShape
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer]
    data: SnapshotDataset
    describe: str


def bench_table_setup(ns: argparse.Namespace) -> Setup:
    reg = registry(100, 20)
    dense, sparse = job_columns(reg, 0.1)
    path = ns.out / f"bench_{ns.rows}_100_20_10_{ns.codec}"
    build_table(path, rows=ns.rows, dense=100, sparse=20, mean_length=10, codec=ns.codec)
    shape = ModelShape(tuple(dense), tuple(sparse), (BUCKETS,) * len(sparse), ("click",), ns.embedding_dim,
                       (512, 256), (512, 256))  # fmt: skip
    return Setup(shape, lambda model: torch.optim.Adagrad(model.parameters(), lr=0.01),
                 bench_dataset(path, reg, dense, sparse, ns.batch_size, buckets=BUCKETS),
                 f"DLRM dim {ns.embedding_dim}, {len(dense)} dense + {len(sparse)} sparse features of a "
                 f"{ns.rows:,}-row table ({ns.codec}), batch {ns.batch_size}")  # fmt: skip


def job_setup(ns: argparse.Namespace) -> Setup:
    """The job's model and optimizer as `featurehouse train` builds them (one rank), on its partitions."""
    spec, reg = load_spec(ns.job)
    if spec.train is None:
        raise SystemExit(f"{ns.job} has no train: section; bench/trainer_stall.py --job needs a training job")
    sparse = spec.train.optimizer in SPARSE_OPTIMIZERS
    shape = dataclasses.replace(model_shape(spec, reg), sparse_gradients=sparse)
    reader = open_reader(spec, reg, warehouse=str(ns.home / "warehouse"))
    return Setup(shape, partial(job_optimizer, spec), reader.dataset,
                 f"job {spec.job_id} ({ns.job}): DLRM dim {shape.embedding_dim}, {len(shape.dense_keys)} dense + "
                 f"{len(shape.sparse_keys)} sparse features, {spec.train.optimizer}, batch {spec.batch_size}, "
                 f"{len(reader.dataset)} batches an epoch")  # fmt: skip


def train(batches, setup: Setup, device: torch.device, steps: int) -> dict:
    """``steps`` steps on ``batches`` (an endless iterator), timing waiting vs computing."""
    torch.manual_seed(0)
    model = DLRM(setup.shape).to(device)
    optimizer = setup.optimizer(model)
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


def from_reader(data: SnapshotDataset, workers: int, pin: bool, prefetch: int = PREFETCH):
    args = {"prefetch_factor": 4} if workers else {"prefetch": prefetch}
    loader = ResumableLoader(data, num_workers=workers, pin_memory=pin, **args)
    while True:
        yield from loader


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=None, help="train this job spec's model on its data")
    parser.add_argument("--home", type=Path, default=Path("data"), help="with --job: the featurehouse home")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--workers", default="0,1,2,4", help="loader worker counts to try")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--embedding-dim", type=int, default=64)
    parser.add_argument("--codec", default="snappy")
    parser.add_argument("--compute-threads", type=int, default=None,
                        help="torch's intra-op threads for every run (default: torch's, as featurehouse train uses)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/featurehouse-bench"))
    ns = parser.parse_args(argv)
    device = pick_device(ns.device)
    if ns.compute_threads:
        torch.set_num_threads(ns.compute_threads)
    setup = job_setup(ns) if ns.job else bench_table_setup(ns)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{ns.steps} steps on {device} ({name}, {torch.get_num_threads()} compute threads), {setup.describe}")
    pin = device.type == "cuda"
    memory = [b.to(device) for b in itertools.islice(from_reader(setup.data, 0, pin), 16)]
    train(itertools.cycle(memory), setup, device, 3)  # warm-up (allocator, kernels), not counted
    ceiling = train(itertools.cycle(memory), setup, device, ns.steps)
    runs = {"reader, 0 workers, no prefetch": train(from_reader(setup.data, 0, pin, prefetch=0), setup, device,
                                                    ns.steps)}  # fmt: skip
    runs |= {f"reader, {w} workers": train(from_reader(setup.data, int(w), pin), setup, device, ns.steps)
             for w in ns.workers.split(",")}  # fmt: skip
    runs["in-memory batches (ceiling)"] = ceiling
    for label, r in runs.items():
        print(f"  {label:<32} {r['samples_per_s']:>11,.0f} samples/s  stall {r['stall']:6.1%}  "
              f"({r['samples_per_s'] / ceiling['samples_per_s']:.2f}x the ceiling; waited {r['wait']:.2f}s, "
              f"computed {r['compute']:.2f}s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
