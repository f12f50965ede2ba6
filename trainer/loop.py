"""One rank's training loop: each step timed as waiting for its batch or computing on it, the epochs'
summaries, and the checkpoint that a rerun resumes from (``trainer/checkpoint.py`` holds the file)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ingest.spec import JobSpec
from schemas.progress import Progress
from trainer.checkpoint import Checkpoint
from trainer.feed import DeviceFeed


@dataclass
class StepClock:
    """Where a rank's training time went: waiting for batches vs computing on them."""

    steps: int = 0
    samples: int = 0
    wait_s: float = 0.0
    compute_s: float = 0.0

    @property
    def stall_fraction(self) -> float:
        total = self.wait_s + self.compute_s
        return self.wait_s / total if total else 0.0

    @property
    def samples_per_s(self) -> float:
        total = self.wait_s + self.compute_s
        return self.samples / total if total else 0.0


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: torch.nn.Module, batch) -> float:
    """One optimizer step on a batch already on the model's device; returns when the device is done (so the
    caller's clock measures compute, not queued work) with the loss."""
    loss = loss_fn(model(batch), batch.labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.detach())  # a device-to-host copy: waits for the step to finish


@dataclass
class Training:
    """One rank's training: the model (``trained``: it, or under torchrun its DistributedDataParallel wrapper),
    the optimizer and loader, the rank's step clock and finished epochs' summaries, and the checkpoint that
    keeps them. ``stopped`` says ``max_steps`` ended it before the last epoch."""

    spec: JobSpec
    model: torch.nn.Module  # trainer/models.py: TorchRec's DLRM or the pure-torch one
    optimizer: torch.optim.Optimizer
    loader: Any  # ResumableLoader or DppLoader
    checkpoint: Checkpoint
    device: torch.device
    progress: Progress
    check_ids: bool = False
    max_steps: int | None = None
    clock: StepClock = field(default_factory=StepClock)
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from_step: int = 0
    stopped: bool = False
    trained: torch.nn.Module | None = None  # the model until distribute() wraps it
    feed: DeviceFeed | None = None  # the epoch's batches on the device; its position is the checkpoint's

    def __post_init__(self) -> None:
        if self.trained is None:
            self.trained = self.model

    def resume(self) -> None:
        """Go on from the rank's checkpoint, when there is one: weights, optimizer, reader position, clock."""
        restored = self.checkpoint.restore(model=self.model, optimizer=self.optimizer, loader=self.loader,
                                           device=self.device)  # fmt: skip
        if restored is None:
            return
        self.clock, self.history = StepClock(**restored.clock), restored.epochs
        self.resumed_from_step = self.clock.steps
        self.progress(f"resuming {self.spec.job_id} from {self.checkpoint.path} at step {self.clock.steps} (epoch "
                      f"{self.loader.dataset.epoch + 1}, {self.loader.delivered} batches into it)")  # fmt: skip

    def distribute(self, world_size: int) -> None:
        """Wrap the model for data parallel steps under torchrun (after resuming: the wrapper starts every rank
        from rank 0's weights)."""
        if world_size > 1 and getattr(self.model, "implementation", "") != "torchrec-sharded":
            self.trained = torch.nn.parallel.DistributedDataParallel(self.model)  # sharded: DMP wrapped its own

    def save(self) -> None:
        self.checkpoint.save(model=self.model, optimizer=self.optimizer, loader=self.feed or self.loader,
                             clock=vars(self.clock).copy(), epochs=self.history)  # fmt: skip

    def train(self) -> None:
        """The epochs left (the first from where the checkpoint stopped), or until ``max_steps``."""
        loss_fn = torch.nn.BCEWithLogitsLoss()
        while self.loader.dataset.epoch < self.spec.train.epochs:
            first = self.clock.steps
            epoch, losses = self._steps(loss_fn)
            if self.stopped:
                self.progress(f"stopped after step {self.clock.steps} (--max-steps); the checkpoint resumes it: "
                              f"{self.checkpoint.path}")  # fmt: skip
                return
            self._end_epoch(epoch, self.clock.steps - first, losses)

    def _steps(self, loss_fn: torch.nn.Module) -> tuple[StepClock, list[float]]:
        """One epoch's steps, each timed as waiting and computing; checkpoints every ``checkpoint_every`` steps
        and, stopping there, at ``max_steps``. Returns the epoch's clock and losses."""
        every = self.spec.train.checkpoint_every
        epoch, losses = StepClock(), []
        self.feed = DeviceFeed(self.loader, self.device)
        batches = iter(self.feed)
        while True:
            waited = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                return epoch, losses
            began = time.perf_counter()
            if self.check_ids:
                self.model.check_ids(batch)
            losses.append(train_step(self.trained, self.optimizer, loss_fn, batch))
            done = time.perf_counter()
            for c in (self.clock, epoch):
                c.steps, c.samples = c.steps + 1, c.samples + len(batch)
                c.wait_s, c.compute_s = c.wait_s + began - waited, c.compute_s + done - began
            if every and self.clock.steps % every == 0:
                self.save()
            if self.max_steps is not None and self.clock.steps >= self.max_steps:
                self.save()
                self.stopped = True
                batches.close()
                return epoch, losses

    def _end_epoch(self, epoch: StepClock, steps: int, losses: list[float]) -> None:
        """The epoch's summary into the history, a checkpoint, and its line."""
        summary = {"epoch": self.loader.dataset.epoch, "steps": steps,
                   "loss": float(np.mean(losses)) if losses else float("nan"),
                   "samples_per_s": epoch.samples_per_s, "stall_fraction": epoch.stall_fraction}  # fmt: skip
        self.history.append(summary)
        self.save()
        self.progress(f"  epoch {summary['epoch']}/{self.spec.train.epochs}: {summary['steps']} steps, loss "
                      f"{summary['loss']:.4f}, {epoch.samples_per_s:,.0f} samples/s, stall {epoch.stall_fraction:.1%} "
                      f"(waited {epoch.wait_s:.2f}s, computed {epoch.compute_s:.2f}s)")  # fmt: skip
