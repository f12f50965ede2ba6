"""A training batch as torch tensors: dense matrix, TorchRec-style jagged sparse ids, labels."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from schemas.errors import ConfigError


@dataclass(frozen=True)
class Batch:
    """B rows: ``dense`` float32[B, D], sparse ids in KeyedJaggedTensor layout, ``labels`` float32[B, L].

    Sparse features are key-major: all B rows of key 0, then all B rows of key 1, ...
    Two keys, three rows (row 1 of ``topics`` is empty)::

        sparse_keys = ("topics", "regions")       B = 3, K = 2
                           topics           |     regions
        row               0     1    2      |   0     1     2
        ids            [7, 9]  []  [4]      |  [1]  [2, 3]  [5]
        values   = [   7, 9,       4,          1,   2, 3,   5  ]   int64[total = 7]
        lengths  = [   2,    0,    1,          1,   2,      1  ]   int32[K * B = 6]
        offsets  = [0,    2,    2,    3,          4,    6,     7]  int64[K * B + 1]
        weights  = [ 1.0, 1.0,    1.0,         .5,  .2, .3,  .9]   float32[total] or None

    ``weights`` is None unless some key is weighted; then unweighted keys get 1.0 per id,
    as TorchRec does. ``to_kjt()`` hands the same tensors to ``KeyedJaggedTensor``, ``to_keyed_tensor()``
    the dense matrix to ``KeyedTensor``.
    """

    dense: torch.Tensor
    dense_keys: tuple[str, ...]
    sparse_keys: tuple[str, ...]
    values: torch.Tensor
    lengths: torch.Tensor
    weights: torch.Tensor | None
    labels: torch.Tensor
    label_keys: tuple[str, ...]

    def __post_init__(self) -> None:
        rows = self.dense.shape[0]
        expected = {
            "dense": (rows, len(self.dense_keys)),
            "labels": (rows, len(self.label_keys)),
            "lengths": (rows * len(self.sparse_keys),),
        }
        for name, shape in expected.items():
            if tuple(getattr(self, name).shape) != shape:
                found = tuple(getattr(self, name).shape)
                raise ConfigError(f"batch {name} has shape {found}, expected {shape} for {rows} rows and the keys")
        if self.weights is not None and self.weights.shape != self.values.shape:
            found, values = tuple(self.weights.shape), tuple(self.values.shape)
            raise ConfigError(f"batch weights have shape {found} but values {values}; give one weight per value")

    def __len__(self) -> int:
        return self.dense.shape[0]

    @property
    def offsets(self) -> torch.Tensor:
        """int64[K * B + 1]: where each (key, row) list starts in ``values``, then the total."""
        zero = torch.zeros(1, dtype=torch.int64, device=self.lengths.device)
        return torch.cat([zero, torch.cumsum(self.lengths, dim=0, dtype=torch.int64)])

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the batch (``weights`` when there are any)."""
        return [t for t in (getattr(self, f.name) for f in fields(self)) if isinstance(t, torch.Tensor)]

    def _map(self, fn) -> Batch:
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{name: fn(t) for name, t in tensors.items() if isinstance(t, torch.Tensor)})

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch on ``device`` (every tensor moved; keys shared): itself where it is there already (the CPU
        trainer's every step: no new Batch, no shape checks again)."""
        device = torch.device(device)
        if all(t.device == device for t in self.tensors()):
            return self
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        """The batch in pinned host memory; ``self`` unchanged where CUDA is unavailable (nothing to pin for)."""
        if not torch.cuda.is_available():
            return self
        return self._map(lambda t: t.pin_memory())

    def to_kjt(self):
        """The sparse part as a ``torchrec.KeyedJaggedTensor`` over the same tensors, no copy (needs torchrec)."""
        return _jagged_tensor_module().KeyedJaggedTensor(
            keys=list(self.sparse_keys), values=self.values, lengths=self.lengths, weights=self.weights
        )

    def to_keyed_tensor(self):
        """The dense part as a ``torchrec.KeyedTensor`` (one column per key) over ``dense``, no copy (needs torchrec)."""
        return _jagged_tensor_module().KeyedTensor(
            keys=list(self.dense_keys), length_per_key=[1] * len(self.dense_keys), values=self.dense, key_dim=1
        )


def _jagged_tensor_module():
    try:
        from torchrec.sparse import jagged_tensor
    except ImportError as err:
        raise ConfigError(
            "torchrec is not installed; `make install` installs it with FBGEMM, pinned with torch (the Makefile's "
            "FBGEMM_VERSION and TORCHREC_VERSION; pip install --no-deps torchrec and fbgemm-gpu-cpu of those versions "
            "elsewhere) to use Batch.to_kjt() and to_keyed_tensor(), or use batch.values, batch.lengths, "
            "batch.offsets and batch.dense directly"
        ) from err
    return jagged_tensor

