"""Benchmark: does the trainer wait for data, and how fast is each model? DLRM steps fed by the reader with
0, 1, 2 and 4 loader workers, against the same steps on batches already in memory (the unstalled ceiling),
for TorchRec's model and the pure-torch one, in one run: each configuration several times after a warm-up,
in rotating order, medians and the TorchRec / torch ratio printed.

    .venv/bin/python -m bench.trainer_stall                        # CPU here; CUDA when present
    .venv/bin/python -m bench.trainer_stall --job jobs/ctr_demo.yaml --home data   # the demo's job
    .venv/bin/python -m bench.trainer_stall --job jobs/ctr_demo.yaml --home data --workers 0 --models torch,torchrec
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
import itertools
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from bench.common import figure, ratio, rounds
from bench.reader import bench_dataset, build_table, job_columns, registry
from ingest.job_reader import open_reader
from ingest.loader import PREFETCH, ResumableLoader, SnapshotDataset
from ingest.spec import load_spec
from trainer.feed import DeviceFeed
from trainer.loop import train_step
from trainer.model import ModelShape, model_shape
from trainer.models import IMPLEMENTATIONS, build_model, choose
from trainer.train import pick_device

BUCKETS = 100_000


@dataclass(frozen=True)
class Setup:
    """What is trained and on what: the model's shape, its optimizer, the reader's dataset."""

    shape: ModelShape
    optimizer: str
    learning_rate: float
    data: SnapshotDataset
    describe: str


def bench_table_setup(ns: argparse.Namespace) -> Setup:
    reg = registry(100, 20)
    dense, sparse = job_columns(reg, 0.1)
    path = ns.out / f"bench_{ns.rows}_100_20_10_{ns.codec}"
    build_table(path, rows=ns.rows, dense=100, sparse=20, mean_length=10, codec=ns.codec)
    shape = ModelShape(tuple(dense), tuple(sparse), (BUCKETS,) * len(sparse), ("click",), ns.embedding_dim,
                       (512, 256), (512, 256))  # fmt: skip
    return Setup(shape, "adagrad", 0.01, bench_dataset(path, reg, dense, sparse, ns.batch_size, buckets=BUCKETS),
                 f"DLRM dim {ns.embedding_dim}, {len(dense)} dense + {len(sparse)} sparse features of a "
                 f"{ns.rows:,}-row table ({ns.codec}), batch {ns.batch_size}")  # fmt: skip


def job_setup(ns: argparse.Namespace) -> Setup:
    """The job's model and optimizer as `featurehouse train` builds them (one rank), on its partitions."""
    spec, reg = load_spec(ns.job)
    if spec.train is None:
        raise SystemExit(f"{ns.job} has no train: section; bench/trainer_stall.py --job needs a training job")
    shape = model_shape(spec, reg)
    reader = open_reader(spec, reg, warehouse=str(ns.home / "warehouse"))
    return Setup(shape, spec.train.optimizer, spec.train.learning_rate, reader.dataset,
                 f"job {spec.job_id} ({ns.job}): DLRM dim {shape.embedding_dim}, {len(shape.dense_keys)} dense + "
                 f"{len(shape.sparse_keys)} sparse features, {spec.train.optimizer}, batch {spec.batch_size}, "
                 f"{len(reader.dataset)} batches an epoch")  # fmt: skip


def train(batches, setup: Setup, device: torch.device, steps: int, implementation: str) -> dict:
    """``steps`` steps of a fresh model on ``batches`` (an endless iterator), timing waiting vs computing."""
    torch.manual_seed(0)
    model, optimizer, _ = build_model(setup.shape, implementation, optimizer=setup.optimizer,
                                      learning_rate=setup.learning_rate, world_size=1, device=device)  # fmt: skip
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
            "compute": compute, "seconds": wait + compute}  # fmt: skip


def from_reader(data: SnapshotDataset, workers: int, device: torch.device, prefetch: int = PREFETCH):
    """The reader's batches, endlessly, as ``featurehouse train`` feeds them (on CUDA: pinned, each copied to
    the device on a side stream while the step before it computes)."""
    args = {"prefetch_factor": 4} if workers else {"prefetch": prefetch}
    loader = ResumableLoader(data, num_workers=workers, pin_memory=device.type == "cuda", **args)
    while True:
        yield from DeviceFeed(loader, device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=None, help="train this job spec's model on its data")
    parser.add_argument("--home", type=Path, default=Path("data"), help="with --job: the featurehouse home")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--workers", default="0,1,2,4", help="loader worker counts to try (empty: the ceiling only)")
    parser.add_argument("--models", default="auto",
                        help=f"comma-separated, of {', '.join(IMPLEMENTATIONS)} (default auto: TorchRec's where it "
                             "loads); with two, the ratio of the first to the second")  # fmt: skip
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each configuration after a warm-up")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--embedding-dim", type=int, default=64)
    parser.add_argument("--codec", default="snappy")
    parser.add_argument("--compute-threads", type=int, default=None,
                        help="torch's intra-op threads for every run (default: torch's, as featurehouse train uses)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/featurehouse-bench"))
    ns = parser.parse_args(argv)
    models = [m.strip() for m in ns.models.split(",") if m.strip()]
    if not models or set(models) - set(IMPLEMENTATIONS):
        parser.error(f"--models {ns.models!r}: give one or two of {', '.join(IMPLEMENTATIONS)}")
    device = pick_device(ns.device)
    if ns.compute_threads:
        torch.set_num_threads(ns.compute_threads)
    setup = job_setup(ns) if ns.job else bench_table_setup(ns)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    for model in models:
        print(f"{model}: {choose(model)[1]}")
    print(f"{ns.steps} steps on {device} ({name}, {torch.get_num_threads()} compute threads), {setup.describe}; "
          f"median of {ns.runs} runs after a warm-up")  # fmt: skip
    memory = list(itertools.islice(from_reader(setup.data, 0, device), 16))
    sources = {"in-memory batches (ceiling)": lambda: itertools.cycle(memory),
               "reader, 0 workers, no prefetch": lambda: from_reader(setup.data, 0, device, prefetch=0)}  # fmt: skip
    sources |= {f"reader, {w} workers": partial(from_reader, setup.data, int(w), device)
                for w in ns.workers.split(",") if w.strip()}  # fmt: skip
    contenders = {f"{model}: {source}": partial(lambda make, m: train(make(), setup, device, ns.steps, m), make, model)
                  for model in models for source, make in sources.items()}  # fmt: skip
    results = rounds(contenders, ns.runs)
    for model in models:
        ceiling = figure(results[f"{model}: in-memory batches (ceiling)"], "samples_per_s")["median"]
        for source in sources:
            runs = results[f"{model}: {source}"]
            speed, stall = figure(runs, "samples_per_s")["median"], figure(runs, "stall")["median"]
            print(f"  {model:<9} {source:<32} {speed:>11,.0f} samples/s  stall {stall:6.1%}  "
                  f"({speed / ceiling:.2f}x the ceiling)")  # fmt: skip
    if len(models) == 2:
        first, second = models
        for source in sources:
            r = ratio(results[f"{first}: {source}"], results[f"{second}: {source}"], "samples_per_s")
            print(f"  {first} / {second}, {source}: {r['median']:.2f}x samples/s [{r['min']:.2f}..{r['max']:.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
