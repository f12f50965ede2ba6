"""Benchmark: the preprocessing service (DPP on Ray) against the in-process reader, in one run, printing ratios.

    .venv/bin/python -m bench.dpp                       # bench/reader.py's 200k-row table (built once)
    .venv/bin/python -m bench.dpp --rows 1000000 --repeat 5

Contenders, on the same table and job (bench/reader.py's: 10% of 120 features, batch 8192):
the in-process reader with 0 DataLoader workers (its batching thread), 1 and 2 worker processes;
DPP with a fixed pool of 1 and of 2 Ray workers on a local Ray instance started once for the run.

  delivery: every contender delivers ``--epochs`` epochs to a consumer that does nothing: the
            time to its first batch (start-up; for DPP the actor pool starting, each worker
            importing torch and pyarrow) and the samples/s after it.
  training: DLRM steps (bench/trainer_stall.py's model, or ``--job``'s) fed by each contender,
            against the same steps on batches already in memory (the ceiling); samples/s and the
            stall fraction (waiting / (waiting + computing)), the pipeline started before timing.

Each contender runs once to warm up, then ``--repeat`` times alternating with the others; the
median run counts, with min and max. Then the capacity model the figures imply: DPP's
samples/s per worker, and the workers a trainer consuming S samples/s needs.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from bench.trainer_stall import Setup, bench_table_setup, job_setup, train
from ingest.dpp import DppLoader, ray_session
from ingest.loader import ResumableLoader
from trainer.models import IMPLEMENTATIONS, choose
from trainer.train import pick_device

#: published DLRM training rates one trainer consumes, samples/s, for the capacity model
TRAINER_RATES = {"NVIDIA's DLRM on one A100 (Criteo 1TB, about 3M samples/s)": 3_000_000,
                 "this machine's CPU trainer (the ceiling measured here)": None}  # fmt: skip


class InProcessLoaders:
    """A maker of fresh in-process loaders (``workers`` DataLoader workers) over ``setup.data`` from its epoch 0."""

    def __init__(self, setup: Setup, workers: int, epochs: int) -> None:
        self.setup, self.workers, self.epochs = setup, workers, epochs

    def __call__(self) -> ResumableLoader:
        self.setup.data.epoch = 0
        return ResumableLoader(self.setup.data, num_workers=self.workers, epochs=self.epochs,
                               **({"prefetch_factor": 4} if self.workers else {}))  # fmt: skip


class DppLoaders:
    """A maker of fresh DPP loaders (a fixed pool of ``workers`` Ray workers) over ``setup.data`` from its epoch 0."""

    def __init__(self, setup: Setup, workers: int, epochs: int) -> None:
        self.setup, self.workers, self.epochs = setup, workers, epochs

    def __call__(self) -> DppLoader:
        self.setup.data.epoch = 0
        return DppLoader(self.setup.data, workers=(self.workers, self.workers), epochs=self.epochs)


def contenders(setup: Setup, epochs: int) -> dict[str, Callable[[], object]]:
    """Label -> a fresh loader over ``setup.data`` from its epoch 0 that runs ``epochs`` epochs (one an iteration)."""
    return {"in process, 0 DataLoader workers": InProcessLoaders(setup, 0, epochs),
            "in process, 1 DataLoader worker": InProcessLoaders(setup, 1, epochs),
            "in process, 2 DataLoader workers": InProcessLoaders(setup, 2, epochs),
            "DPP, 1 Ray worker": DppLoaders(setup, 1, epochs), "DPP, 2 Ray workers": DppLoaders(setup, 2, epochs)}


def deliver(make: Callable[[], object], epochs: int) -> dict:
    """A fresh loader's start-up (until its first batch) and its steady rate after it, over ``epochs`` epochs.

    The consumer takes each batch at once, so no output piles up behind it: from the first batch on, the
    rate is the producers' (DataLoader workers re-forked every epoch, Ray workers kept for the whole run)."""
    started = time.perf_counter()
    loader = make()
    first = None
    rows = 0
    for _ in range(epochs):
        for batch in loader:
            if first is None:
                first = time.perf_counter()
            else:
                rows += len(batch)
    ended = time.perf_counter()
    if hasattr(loader, "close"):
        loader.close()
    return {"first_s": first - started, "steady": rows / (ended - first)}


def endless(loader) -> Iterator:
    while True:
        yield from loader


def median_of(runs: list[dict], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs]
    return statistics.median(values), min(values), max(values)


def memory_batches(setup: Setup, device: torch.device, model: str) -> list:
    """16 batches of the reader on ``device``, for the ceiling; the model's steps warmed on them (not counted)."""
    memory = [b.to(device) for b in itertools.islice(endless(ResumableLoader(setup.data)), 16)]
    train(itertools.cycle(memory), setup, device, 3, model)  # the allocator and kernels, before any clock
    return memory


class TrainingFedBy:
    """``steps`` DLRM steps fed by a fresh loader from ``make``, its pipeline (or workers) started before the clock."""

    def __init__(self, make: Callable[[], object], setup: Setup, device: torch.device, steps: int, model: str) -> None:
        self.make, self.setup, self.device, self.steps, self.model = make, setup, device, steps, model

    def __call__(self) -> dict:
        loader = self.make()
        feed = endless(loader)
        next(feed)  # the pipeline (or the workers) started before the clock
        result = train(feed, self.setup, self.device, self.steps, self.model)
        feed.close()
        loader.close()
        return result | {"seconds": result["wait"] + result["compute"]}


class TrainingInMemory:
    """``steps`` DLRM steps on batches already on the device: the ceiling."""

    def __init__(self, memory: list, setup: Setup, device: torch.device, steps: int, model: str) -> None:
        self.memory, self.setup, self.device, self.steps, self.model = memory, setup, device, steps, model

    def __call__(self) -> dict:
        result = train(itertools.cycle(self.memory), self.setup, self.device, self.steps, self.model)
        return result | {"seconds": result["wait"] + result["compute"]}


def section(work: Path, *, rows: int = 200_000, steps: int = 60, runs: int = 3, local_workers=(0, 1, 2),
            dpp_workers=(1, 2), embedding_dim: int = 16, batch: int = 8192, model: str = "auto") -> dict:  # fmt: skip
    """DLRM steps fed by the in-process reader (its batching thread, DataLoader workers) and by DPP's Ray workers,
    against the same steps on batches already in memory: samples/s and the stall fraction against workers."""
    import argparse

    from bench.common import figure, rounds, say

    ns = argparse.Namespace(rows=rows, codec="snappy", out=work, embedding_dim=embedding_dim, batch_size=batch)
    setup = bench_table_setup(ns)
    device = pick_device("auto")
    model, why = choose(model)
    say(f"stall: {setup.describe}, {steps} steps a run on {device}, {why}")
    memory = memory_batches(setup, device, model)
    epochs = -(-steps // len(setup.data)) + 1  # one pipeline for all the steps
    feeders = {"in-memory batches (ceiling)": TrainingInMemory(memory, setup, device, steps, model)}
    feeders |= {f"reader, {w} DataLoader workers": TrainingFedBy(InProcessLoaders(setup, w, epochs), setup, device,
                                                                 steps, model) for w in local_workers}  # fmt: skip
    feeders |= {f"DPP, {w} Ray workers": TrainingFedBy(DppLoaders(setup, w, epochs), setup, device, steps, model)
                for w in dpp_workers}  # fmt: skip
    with ray_session(None):
        runs_ = rounds(feeders, runs, label="stall: ")
    ceiling = runs_["in-memory batches (ceiling)"]
    out: dict = {"describe": setup.describe, "device": str(device), "steps": steps, "torch_threads": torch.get_num_threads(),
                 "model": why, "feeders": {}}  # fmt: skip
    for label, r in runs_.items():
        out["feeders"][label] = {"samples_per_s": figure(r, "samples_per_s"), "stall": figure(r, "stall"),
                                 "of_ceiling": figure([{"v": x["samples_per_s"] / c["samples_per_s"]}
                                                       for x, c in zip(r, ceiling, strict=True)], "v")}  # fmt: skip
    return out


def section_report(out: dict) -> str:
    lines = [f"Stall: {out['describe']}; {out.get('model', 'DLRM')}; {out['steps']} steps on {out['device']}, "
             f"{out['torch_threads']} torch threads"]
    for label, f in out["feeders"].items():
        s, st, oc = f["samples_per_s"], f["stall"], f["of_ceiling"]
        lines.append(f"  {label:<32} {s['median']:>9,.0f} [{s['min']:,.0f}..{s['max']:,.0f}] samples/s, stall "
                     f"{st['median']:6.1%} [{st['min']:.1%}..{st['max']:.1%}], {oc['median']:.2f}x the ceiling")  # fmt: skip
    return "\n".join(lines)


def delivery_runs(setup: Setup, epochs: int, repeat: int) -> dict[str, list[dict]]:
    """Every contender's delivery of ``epochs`` epochs, ``repeat`` times after a warm-up, alternating."""
    made = contenders(setup, epochs)
    delivery: dict[str, list[dict]] = {label: [] for label in made}
    for rep in range(repeat + 1):
        for label, make in made.items():
            result = deliver(make, epochs)
            if rep:
                delivery[label].append(result)
    return delivery


def print_delivery(delivery: dict[str, list[dict]], epochs: int, samples: int) -> None:
    print(f"\ndelivery ({epochs} epochs of {samples:,} samples to a consumer that does nothing):")
    base = median_of(delivery["in process, 0 DataLoader workers"], "steady")[0]
    for label, runs in delivery.items():
        steady, lo, hi = median_of(runs, "steady")
        first = median_of(runs, "first_s")[0]
        print(f"  {label:<34} {steady:>11,.0f} samples/s after the first batch ({lo:,.0f} .. {hi:,.0f}), "
              f"{steady / base:.2f}x in process; first batch after {first:.2f}s")  # fmt: skip


def training_runs(setup: Setup, device: torch.device, steps: int, repeat: int, model: str) -> dict[str, list[dict]]:
    """``steps`` DLRM steps on in-memory batches and fed by every contender, ``repeat`` times after a warm-up."""
    memory = memory_batches(setup, device, model)
    feeders = contenders(setup, -(-steps // len(setup.data)) + 1)  # one pipeline for all the steps
    training: dict[str, list[dict]] = {label: [] for label in ["in-memory batches (ceiling)", *feeders]}
    for rep in range(repeat + 1):
        for label in training:
            if label in feeders:
                loader = feeders[label]()
                feed = endless(loader)
                next(feed)  # the pipeline (or the workers) started before the clock
            else:
                loader, feed = None, itertools.cycle(memory)
            result = train(feed, setup, device, steps, model)
            if loader is not None:
                feed.close()
                loader.close()
            if rep:
                training[label].append(result)
    return training


def print_training(training: dict[str, list[dict]], steps: int, device: torch.device) -> float:
    """The training figures; the ceiling's median samples/s."""
    ceiling = median_of(training["in-memory batches (ceiling)"], "samples_per_s")[0]
    print(f"\ntraining ({steps} steps on {device}):")
    for label, runs in training.items():
        rate, lo, hi = median_of(runs, "samples_per_s")
        stall, s_lo, s_hi = median_of(runs, "stall")
        print(f"  {label:<34} {rate:>11,.0f} samples/s ({lo:,.0f} .. {hi:,.0f}), stall {stall:6.1%} "
              f"({s_lo:.1%} .. {s_hi:.1%}), {rate / ceiling:.2f}x the ceiling")  # fmt: skip
    return ceiling


def print_capacity(delivery: dict[str, list[dict]], ceiling: float) -> None:
    per_worker = median_of(delivery["DPP, 1 Ray worker"], "steady")[0]
    two = median_of(delivery["DPP, 2 Ray workers"], "steady")[0]
    print(f"\ncapacity model: one DPP worker (one core) delivers {per_worker:,.0f} samples/s of this job; two on "
          f"this 2-core machine {two:,.0f} ({two / per_worker:.2f}x: they share the cores with the client)")  # fmt: skip
    for name, rate in TRAINER_RATES.items():
        rate = rate or ceiling
        print(f"  a trainer consuming {rate:,.0f} samples/s ({name}) needs {rate / per_worker:,.1f} such workers")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=None, help="train this job spec's model on its data")
    parser.add_argument("--home", type=Path, default=Path("data"), help="with --job: the featurehouse home")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--codec", default="snappy")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per delivery run")
    parser.add_argument("--steps", type=int, default=60, help="training steps per training run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/featurehouse-bench"))
    parser.add_argument("--model", choices=IMPLEMENTATIONS, default="auto",
                        help="the DLRM trained (default auto: TorchRec's where it loads)")
    ns = parser.parse_args(argv)
    device = pick_device("auto")
    model, why = choose(ns.model)
    setup = job_setup(ns) if ns.job else bench_table_setup(ns)
    batches = len(setup.data)
    print(f"{setup.describe}; {why}; {batches} batches an epoch; {torch.get_num_threads()} torch compute threads; "
          f"median of {ns.repeat} alternating runs after a warm-up (min .. max)")
    with ray_session(None):
        delivery = delivery_runs(setup, ns.epochs, ns.repeat)
        print_delivery(delivery, ns.epochs, sum(sum(w.batch_sizes) for w in setup.data.windows(0)))  # the job's batches
        ceiling = print_training(training_runs(setup, device, ns.steps, ns.repeat, model), ns.steps, device)
    print_capacity(delivery, ceiling)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
