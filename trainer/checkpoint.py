"""A training rank's checkpoint: one file per rank under the run's folder, written atomically.

It holds the model, the optimizer, the loader's position (epoch and batches delivered), the rank's step
clock and the finished epochs' summaries: all a rerun needs to go on exactly where the file was written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a kill mid-write leaves the previous checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Restored:
    """What a checkpoint gives back besides the weights, optimizer and loader state it loads into them."""

    clock: dict[str, Any]  # the rank's StepClock, as vars()
    epochs: list[dict[str, Any]]


@dataclass(frozen=True)
class Checkpoint:
    path: Path

    @classmethod
    def of_rank(cls, run_dir: Path, *, rank: int, world_size: int) -> Checkpoint:
        return cls(run_dir / f"checkpoint-rank{rank}-of-{world_size}.pt")

    def save(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader, clock: dict[str, Any],
             epochs: list[dict[str, Any]]) -> None:  # fmt: skip
        save_checkpoint(self.path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                    "loader": loader.state_dict(), "clock": clock, "epochs": epochs})  # fmt: skip

    def restore(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader,
                device: torch.device) -> Restored | None:  # fmt: skip
        """Load the file, when there is one, into the model, optimizer and loader; None when there is none."""
        if not self.path.exists():
            return None
        state = torch.load(self.path, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        return Restored(state["clock"], state["epochs"])
