"""A training rank's checkpoint: one file per rank under the run's folder, written atomically.

It holds the model, the optimizer, the loader's position (epoch and batches delivered), the rank's step
clock and the finished epochs' summaries: all a rerun needs to go on exactly where the file was written.
It also says its format and which model implementation wrote it (``trainer/models.py``): the two name their
weights differently, so a file of another implementation, or one written before the format was recorded
(before the TorchRec model), is refused rather than misread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor

from schemas.errors import ConfigError

#: 2: the model's implementation recorded (2026-12-06, the TorchRec model); files without a format are 1.
FORMAT = 2


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a kill mid-write leaves the previous checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


_SHARDS = "local_shards"


def _plain(value: Any) -> Any:
    """``value`` with every ShardedTensor (a sharded model's tables and their optimizer state) as its rank's own
    shards, plain tensors, so that the file loads without a process group; dicts and lists walked."""
    if isinstance(value, ShardedTensor):
        return {_SHARDS: [shard.tensor for shard in value.local_shards()]}
    if isinstance(value, dict):
        return {key: _plain(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@torch.no_grad()
def _into(saved: Any, live: Any) -> Any:
    """``saved`` (from :func:`_plain`) to load into an object whose state is ``live``: a ShardedTensor's shards get
    the saved tensors in place and stand for themselves; everything else is the saved value."""
    if isinstance(live, ShardedTensor):
        for shard, tensor in zip(live.local_shards(), saved[_SHARDS], strict=True):
            shard.tensor.copy_(tensor)
        return live
    if isinstance(live, dict) and isinstance(saved, dict):
        return {key: _into(v, live[key]) if key in live else v for key, v in saved.items()}
    return saved


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
        save_checkpoint(self.path, {"format": FORMAT, "implementation": model.implementation,
                                    "model": _plain(model.state_dict()), "optimizer": _plain(optimizer.state_dict()),
                                    "loader": loader.state_dict(), "clock": clock, "epochs": epochs})  # fmt: skip

    def restore(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader,
                device: torch.device) -> Restored | None:  # fmt: skip
        """Load the file, when there is one, into the model, optimizer and loader; None when there is none."""
        if not self.path.exists():
            return None
        state = torch.load(self.path, map_location=device, weights_only=False)
        found = state.get("format", 1)
        if found != FORMAT:
            raise ConfigError(f"checkpoint {self.path} is of format {found}, written before this trainer's format "
                              f"{FORMAT} (which records the model implementation); it cannot be resumed: rerun with "
                              "--restart to start over, or resume it with the featurehouse version that wrote it")
        if state["implementation"] != model.implementation:
            raise ConfigError(f"checkpoint {self.path} was written by the {state['implementation']} model and this "
                              f"run builds the {model.implementation} one; their weights differ in name and layout: "
                              f"run with --model {state['implementation']} to resume it, or --restart")  # fmt: skip
        model.load_state_dict(_into(state["model"], model.state_dict()))
        optimizer.load_state_dict(_into(state["optimizer"], optimizer.state_dict()))
        loader.load_state_dict(state["loader"])
        return Restored(state["clock"], state["epochs"])
