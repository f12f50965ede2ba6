"""Batches onto the training device, the next one's copy overlapping this one's step.

On CUDA, batch i+1's host-to-device copy is issued on a side stream before batch i is handed to the step,
so the copy runs while the step computes (TorchRec's ``TrainPipelineBase`` habit). The compute stream waits
for the side stream before using a batch, and every tensor of the batch is ``record_stream``-ed on the
compute stream, so the caching allocator does not hand its memory to a later copy while the step still
reads it. The loader's batches are pinned (``pin_memory``), so the copies are truly asynchronous.

Holding a batch ahead moves the loader one batch past the step: ``state_dict()`` gives the loader's
position before the batch held ahead was taken, which is what a checkpoint must keep (a resume then makes
that batch again). On the CPU there is nothing to overlap and the batches pass through.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ingest.batch import Batch


class DeviceFeed:
    """One epoch of ``loader``'s batches on ``device``; ``ahead`` (default: on CUDA) copies one batch ahead."""

    def __init__(self, loader: Any, device: torch.device, *, ahead: bool | None = None) -> None:
        self.loader, self.device = loader, device
        self.ahead = device.type == "cuda" if ahead is None else ahead
        self._position: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The loader's position after the batches handed to the step, none held ahead."""
        return self._position if self._position is not None else self.loader.state_dict()

    def __iter__(self) -> Iterator[Batch]:
        if not self.ahead:
            for batch in self.loader:
                yield batch.to(self.device, non_blocking=True)
            return
        side = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        batches = iter(self.loader)
        try:
            held = self._copy(next(batches, None), side)
            while held is not None:
                batch = held
                if side is not None:
                    compute = torch.cuda.current_stream(self.device)
                    compute.wait_stream(side)
                    for t in batch.tensors():
                        t.record_stream(compute)
                self._position = self.loader.state_dict()  # this batch taken, the next not yet
                held = self._copy(next(batches, None), side)
                yield batch
            self._position = None  # the epoch over: the loader's own position holds
        finally:  # closed mid-epoch (max_steps): the held batch is dropped, the position stays before it
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def _copy(self, batch: Batch | None, side: torch.cuda.Stream | None) -> Batch | None:
        if batch is None or side is None:
            return None if batch is None else batch.to(self.device)
        with torch.cuda.stream(side):
            return batch.to(self.device, non_blocking=True)
