"""``featurehouse train``: DLRM on a job's partitions through the reader, evaluated, checkpointed, stall-accounted.

    featurehouse train --job jobs/ctr_demo.yaml                      # CPU, or CUDA when present
    torchrun --nproc_per_node 2 -m trainer.train --job jobs/ctr_demo.yaml   # data parallel (gloo / nccl)

It trains on the spec's ``ds`` for ``train.epochs`` and evaluates on ``train.eval_ds``:
AUC, log loss, normalized entropy and calibration per label type. Every step is timed
as *waiting* (for the next batch) or *computing* (forward, backward, optimizer; the loss is
read back after the optimizer step, so on CUDA the clock stops when the device is done), so
the stall fraction, wait / (wait + compute), says whether the trainer ever waits for data. A checkpoint (model, optimizer, reader position) is written
every ``train.checkpoint_every`` steps and at each epoch's end; rerunning the same
command resumes from it exactly (``--restart`` starts over). The run, with its bytes,
time split and stall fraction, is recorded in ``featurehouse_catalog.feature_usage``.
The epoch loop and resuming are ``trainer/loop.py``'s, the checkpoint file ``trainer/checkpoint.py``'s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as torch_dist

from ingest.dpp import (  # the module imports Ray only when a session starts
    DppLoader,
    parse_workers,
    ray_session,
)
from ingest.job_reader import open_reader
from ingest.loader import PREFETCH, ResumableLoader
from ingest.projected_reads import IoCounter
from ingest.spec import JobSpec, load_spec
from ingest.usage import UsageRecord, record_usage
from schemas.catalog import FEATURE_USAGE, catalog_table_uri
from schemas.config import NON_NEGATIVE_INT, POSITIVE_INT, ReaderJobConfig, satisfies
from schemas.errors import ConfigError
from schemas.exit import run_command
from schemas.names import format_ds
from schemas.paths import default_home
from schemas.storage import Store, add_profile_argument, reader_store
from schemas.progress import Progress, silent
from trainer.checkpoint import Checkpoint
from trainer.loop import StepClock, Training
from trainer.metrics import Metrics, evaluate
from trainer.model import model_shape
from trainer.models import IMPLEMENTATIONS, Implementation, build_model

Device = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True, kw_only=True)
class TrainConfig(ReaderJobConfig):
    job: Path
    out: Path | None = None  # default: <home>/runs/<job_id>
    workers: int = 0
    prefetch: int = PREFETCH  # batches a thread makes ahead when workers is 0 (0: in the training thread)
    device: Device = "auto"
    model: Implementation = "auto"  # TorchRec's DLRM where FBGEMM loads, else the pure-torch one
    shard_embeddings: bool = False  # under torchrun: TorchRec's DistributedModelParallel, each table on one rank
    restart: bool = False
    max_steps: int | None = None  # stop after this many steps (a checkpoint is written first), as a kill would
    record: bool = True
    dpp: bool = False  # batches from the preprocessing service (ingest/dpp.py) instead of this process
    dpp_address: str | None = None  # its Ray cluster; None: a local Ray instance for this run
    dpp_workers: tuple[int, int] = (1, 2)

    def __post_init__(self) -> None:
        if not satisfies(self.workers, NON_NEGATIVE_INT):
            raise ConfigError(f"--workers {self.workers} must be 0 (read in this process) or more")
        if not satisfies(self.prefetch, NON_NEGATIVE_INT):
            raise ConfigError(f"--prefetch {self.prefetch} must be 0 (make batches in the training thread) or more")
        if not satisfies(self.max_steps, POSITIVE_INT, optional=True):
            raise ConfigError(f"--max-steps {self.max_steps} must be a positive number of steps")
        if self.dpp and self.workers:
            raise ConfigError(f"--dpp with --workers {self.workers}: the service's workers do the reading; "
                              "drop --workers (or use --dpp-workers MIN:MAX)")  # fmt: skip


@dataclass
class TrainResult:
    job_id: str
    metrics: dict[str, Metrics]
    clock: StepClock
    cost: IoCounter
    out: Path
    table_version: int
    resumed_from_step: int = 0
    epochs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


@contextmanager
def distributed(device: torch.device):
    """torchrun's process group (gloo on CPU, nccl on CUDA) when WORLD_SIZE > 1; one rank otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        yield Ranks()
        return
    ranks = Ranks(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    torch_dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=ranks.rank, world_size=world_size)
    try:
        yield ranks
        # On success only (a failed rank would wait here for peers that never come): a gloo worker thread
        # frees each finished collective after waking the caller, and freeing all_gather_object's tensors
        # takes the GIL. A rank that exits straight after its last gather can reach interpreter shutdown
        # first, and the thread then aborts the process ("terminate called without an active exception").
        # Waiting here, with the GIL released, lets it finish.
        torch_dist.barrier()
    finally:
        torch_dist.destroy_process_group()


def pick_device(choice: Device) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA device is visible; use --device cpu or auto")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _gather(ranks: Ranks, value: Any) -> list[Any]:
    if ranks.world_size == 1:
        return [value]
    out: list[Any] = [None] * ranks.world_size
    torch_dist.all_gather_object(out, value)
    return out


def _train_spec(config: TrainConfig) -> tuple[JobSpec, Any]:
    """The job spec and its registry; a spec without a ``train:`` section is refused."""
    spec, registry = load_spec(config.job, registry_dir=config.registry_dir)
    if spec.train is None:
        raise ConfigError(f"{spec.source}: no train: section; add e.g. train: {{eval_ds: {{from: ..., to: ...}}, "
                          "epochs: 3}} to train this job")  # fmt: skip
    return spec, registry


def _loader(config: TrainConfig, reader, *, epochs: int, ranks: Ranks, device: torch.device, progress: Progress,
            stack: ExitStack):  # fmt: skip
    """The in-process loader, or with ``--dpp`` the preprocessing service's (its Ray session closed by ``stack``)."""
    if not config.dpp:
        return ResumableLoader(reader.dataset, num_workers=config.workers, prefetch=config.prefetch, epochs=epochs,
                               pin_memory=device.type == "cuda")  # fmt: skip
    if ranks.world_size > 1 and config.dpp_address is None:
        raise ConfigError(f"--dpp under torchrun ({ranks.world_size} ranks) needs --address of a running Ray "
                          "cluster (`ray start --head`), so that the ranks share one; each rank reads its own share")
    stack.enter_context(ray_session(config.dpp_address))
    loader = DppLoader(reader.dataset, workers=config.dpp_workers, epochs=epochs, progress=progress,
                       pin_memory=device.type == "cuda")  # fmt: skip
    stack.callback(loader.close)
    return loader


def _evaluate(spec: JobSpec, registry, model: torch.nn.Module, *, warehouse: Store, ranks: Ranks, device: torch.device,
              workers: int) -> tuple[dict[str, Metrics], IoCounter]:  # fmt: skip
    eval_spec = spec.model_copy(update={"ds": spec.train.eval_days, "shuffle_buffer": 0, "drop_last": False})
    reader = open_reader(eval_spec, registry, warehouse=warehouse, rank=ranks.rank, world_size=ranks.world_size)
    loader = ResumableLoader(reader.dataset, num_workers=workers, epochs=1, pin_memory=device.type == "cuda")
    predictions, labels = [], []
    model.eval()
    with torch.no_grad():
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            predictions.append(torch.sigmoid(model(batch)).cpu().numpy())
            labels.append(batch.labels.cpu().numpy())
    model.train()
    mine = (np.concatenate(predictions), np.concatenate(labels))
    gathered = _gather(ranks, mine)
    p = np.concatenate([g[0] for g in gathered])
    y = np.concatenate([g[1] for g in gathered])
    return {label: evaluate(y[:, i], p[:, i]) for i, label in enumerate(spec.labels)}, loader.counter


def _evaluate_unless_stopped(training: Training, registry, config: TrainConfig, *, warehouse: Store, ranks: Ranks,
                             device: torch.device) -> tuple[dict[str, Metrics], IoCounter]:  # fmt: skip
    """The eval metrics (none for a run ``max_steps`` stopped) and the rank's reads, training's and evaluation's."""
    cost = IoCounter()
    cost.merge(training.loader.counter)
    if training.stopped:
        return {}, cost
    metrics, eval_cost = _evaluate(training.spec, registry, training.model, warehouse=warehouse, ranks=ranks,
                                   device=device, workers=config.workers)  # fmt: skip
    cost.merge(eval_cost)
    return metrics, cost


def _plan_line(spec: JobSpec, shape, reader, ranks: Ranks, device: torch.device) -> str:
    return (f"train {spec.job_id}: {len(spec.days)} ds {format_ds(spec.days[0])} .. {format_ds(spec.days[-1])}, "
            f"{len(shape.dense_keys)} dense + {len(shape.sparse_keys)} sparse features, {len(reader.dataset)} "
            f"batches of {spec.batch_size} per epoch per rank, {ranks.world_size} rank(s) on {device}")  # fmt: skip


def run(config: TrainConfig, *, progress: Progress = print) -> TrainResult:
    """Train the job's DLRM (resuming from this rank's checkpoint unless ``restart``), evaluate it unless
    ``max_steps`` stopped it, and report: the summary lines, metrics.json and the usage record."""
    spec, registry = _train_spec(config)
    shape = model_shape(spec, registry)
    device = pick_device(config.device)
    warehouse = reader_store(config.home, config.profile)
    run_dir = config.out or config.home / "runs" / spec.job_id
    with distributed(device) as ranks, ExitStack() as stack:
        say = progress if ranks.main else silent
        started_at = dt.datetime.now(dt.UTC)
        torch.manual_seed(spec.seed)
        model, optimizer, model_line = build_model(shape, config.model, optimizer=spec.train.optimizer,
                                                   learning_rate=spec.train.learning_rate,
                                                   world_size=ranks.world_size, device=device, seed=spec.seed,
                                                   shard_embeddings=config.shard_embeddings)  # fmt: skip
        say(model_line)
        reader = open_reader(spec, registry, warehouse=warehouse, rank=ranks.rank, world_size=ranks.world_size)
        loader = _loader(config, reader, epochs=spec.train.epochs, ranks=ranks, device=device, progress=say, stack=stack)
        run_dir.mkdir(parents=True, exist_ok=True)
        checkpoint = Checkpoint.of_rank(run_dir, rank=ranks.rank, world_size=ranks.world_size)
        training = Training(spec, model, optimizer, loader, checkpoint, device, say, check_ids=shape.check_ids,
                            max_steps=config.max_steps)  # fmt: skip
        if not config.restart:
            training.resume()
        training.distribute(ranks.world_size)
        say(_plan_line(spec, shape, reader, ranks, device))
        training.train()
        metrics, cost = _evaluate_unless_stopped(training, registry, config, warehouse=warehouse, ranks=ranks,
                                                 device=device)  # fmt: skip
        result = TrainResult(spec.job_id, metrics, training.clock, cost, run_dir, reader.snapshot.version,
                             training.resumed_from_step, training.history)  # fmt: skip
        _report(result, spec, ranks, started_at=started_at, config=config, warehouse=warehouse, progress=say)
        return result


def _report(result: TrainResult, spec: JobSpec, ranks: Ranks, *, started_at: dt.datetime, config: TrainConfig,
            warehouse: Store, progress: Progress) -> None:  # fmt: skip
    """Add up every rank's reads, print the summary, write metrics.json and the usage record (rank 0)."""
    costs = _gather(ranks, (result.cost, vars(result.clock)))
    total, clock = _totals(costs, ranks)
    if not ranks.main or not result.metrics:
        return
    _print_summary(result, total, clock, ranks, progress)
    _write_metrics(result, spec, total, clock, ranks, costs)
    if config.record:
        _record(result, spec, total, clock, ranks, started_at=started_at, warehouse=warehouse, progress=progress)


def _totals(costs: list[tuple[IoCounter, dict[str, Any]]], ranks: Ranks) -> tuple[IoCounter, StepClock]:
    """Every rank's reads added up, and a clock of their steps and samples with per-rank mean times."""
    total, clock = IoCounter(), StepClock()
    for cost, rank_clock in costs:
        total.merge(cost)
        clock.steps, clock.samples = clock.steps + rank_clock["steps"], clock.samples + rank_clock["samples"]
        clock.wait_s += rank_clock["wait_s"] / ranks.world_size  # per-rank means
        clock.compute_s += rank_clock["compute_s"] / ranks.world_size
    return total, clock


def _print_summary(result: TrainResult, total: IoCounter, clock: StepClock, ranks: Ranks,
                   progress: Progress) -> None:  # fmt: skip
    for label, m in result.metrics.items():
        progress(f"  eval {label}: AUC {m.auc:.4f}, log loss {m.log_loss:.4f}, NE {m.normalized_entropy:.4f}, "
                 f"calibration {m.calibration:.3f} ({m.rows:,} rows, {m.positives:,} positives)")  # fmt: skip
    progress(f"  trained {clock.samples:,} samples in {clock.steps:,} steps: {clock.samples_per_s * ranks.world_size:,.0f} "
             f"samples/s, stall {clock.stall_fraction:.1%}; read {total.bytes_read:,} bytes, all columns of the same "
             f"rows: {total.bytes_all_columns:,}")  # fmt: skip


def _write_metrics(result: TrainResult, spec: JobSpec, total: IoCounter, clock: StepClock, ranks: Ranks,
                   costs: list[tuple[IoCounter, dict[str, Any]]]) -> None:  # fmt: skip
    (result.out / "metrics.json").write_text(json.dumps({
        "job_id": spec.job_id, "metrics": {k: m.as_dict() for k, m in result.metrics.items()},
        "samples": clock.samples, "steps": clock.steps, "samples_per_s": clock.samples_per_s * ranks.world_size,
        "stall_fraction": clock.stall_fraction, "bytes_read": total.bytes_read, "epochs": result.epochs,
        "world_size": ranks.world_size,
        "ranks": [{"rank": r, "steps": c["steps"], "samples": c["samples"]} for r, (_cost, c) in enumerate(costs)],
    }, indent=2))  # fmt: skip


def _record(result: TrainResult, spec: JobSpec, total: IoCounter, clock: StepClock, ranks: Ranks, *,
            started_at: dt.datetime, warehouse: Store, progress: Progress) -> None:  # fmt: skip
    """The run's row in featurehouse_catalog.feature_usage: its ds range, reads, time split and stall."""
    days = sorted({*spec.days, *spec.train.eval_days})
    usage = UsageRecord(
        job_id=spec.job_id, dataset=spec.dataset, ds_from=format_ds(days[0]), ds_to=format_ds(days[-1]),
        features=spec.feature_names, bytes_read=total.bytes_read, rows_read=total.rows, table_version=result.table_version,
        started_at=started_at, ended_at=dt.datetime.now(dt.UTC), cost=total, compute_s=clock.compute_s,
        samples_per_s=clock.samples_per_s * ranks.world_size, stall_fraction=clock.stall_fraction,
    )  # fmt: skip
    version = record_usage(catalog_table_uri(warehouse.warehouse, FEATURE_USAGE), [usage], store=warehouse)
    progress(f"  recorded in featurehouse_catalog.feature_usage (version {version}), run {usage.run_id}")


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse train",
        description="Train the job spec's DLRM on its ds through the reader, evaluate on train.eval_ds, print AUC, "
        "NE, samples/s and the stall fraction, and record the run in featurehouse_catalog.feature_usage. "
        "Run under torchrun for data parallel training.",
    )
    parser.add_argument("--job", type=Path, required=True, help="the job spec YAML, with model: and train: sections")
    parser.add_argument("--home", type=Path, default=None,
                        help="data folder holding warehouse/ (default: $FEATUREHOUSE_HOME or ./data)")  # fmt: skip
    parser.add_argument("--registry-dir", type=Path, default=None, help="folder of registry files")
    add_profile_argument(parser)
    parser.add_argument("--out", type=Path, default=None, help="checkpoints and metrics.json (default: HOME/runs/JOB)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per rank (default 0)")
    parser.add_argument("--prefetch", type=int, default=PREFETCH,
                        help="with --workers 0: batches a thread makes ahead of the steps, into the next epoch too "
                             "(default %(default)s); 0 makes each in the training thread when it is needed")  # fmt: skip
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: CUDA when present, else the CPU")  # fmt: skip
    parser.add_argument("--model", choices=IMPLEMENTATIONS, default="auto",
                        help="auto (default): TorchRec's DLRM where TorchRec and FBGEMM load, else the pure-torch "
                             "DLRM; torchrec or torch to insist (the choice is printed at start-up)")  # fmt: skip
    parser.add_argument("--shard-embeddings", action="store_true",
                        help="under torchrun: model-parallel embeddings, each table on one rank (TorchRec's "
                             "DistributedModelParallel, table-wise), instead of a replica of every table per rank")  # fmt: skip
    parser.add_argument("--restart", action="store_true", help="ignore an existing checkpoint and start over")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="stop after N steps, leaving a checkpoint the next run resumes")  # fmt: skip
    parser.add_argument("--no-record", action="store_true", help="do not record the run in feature_usage")
    parser.add_argument("--dpp", action="store_true",
                        help="train from the preprocessing service: the reader's work on Ray workers (featurehouse "
                             "dpp); evaluation still reads in this process")  # fmt: skip
    parser.add_argument("--address", default=None,
                        help="with --dpp: a running Ray cluster (auto, HOST:6379, ray://HOST:10001); default: a local "
                             "Ray instance for this run (one rank only)")  # fmt: skip
    parser.add_argument("--dpp-workers", default="1:2", help="with --dpp: MIN:MAX service workers per rank (default 1:2)")
    ns = parser.parse_args(argv)
    return TrainConfig(job=ns.job, home=(ns.home or default_home()).resolve(), registry_dir=ns.registry_dir, profile=ns.profile,
                       out=ns.out, workers=ns.workers, prefetch=ns.prefetch, device=ns.device, model=ns.model,
                       shard_embeddings=ns.shard_embeddings, restart=ns.restart,
                       max_steps=ns.max_steps, record=not ns.no_record, dpp=ns.dpp, dpp_address=ns.address,
                       dpp_workers=parse_workers(ns.dpp_workers, flag="--dpp-workers"))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: run(parse_args(argv)) and None)


if __name__ == "__main__":
    raise SystemExit(main())
