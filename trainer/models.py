"""The model a run trains, chosen once at start-up: TorchRec's DLRM where FBGEMM loads, the pure-torch DLRM
where it does not (or where ``--model torch`` asks), both behind ``model(batch) -> logits``, with the optimizer
that keeps embedding updates sparse where the job's optimizer and ranks allow it.

    model, optimizer, line = build_model(shape, "auto", optimizer="sgd", learning_rate=0.1, world_size=1,
                                         device=torch.device("cpu"))
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Iterable
from typing import Literal

import torch

from schemas.errors import ConfigError
from trainer.model import DLRM, ModelShape

Implementation = Literal["auto", "torchrec", "torch"]
IMPLEMENTATIONS: tuple[str, ...] = ("auto", "torchrec", "torch")

#: Optimizers whose step on a sparse gradient equals their step on the same gradient made dense (rows a batch
#: did not touch have a zero gradient, and neither changes them); Adam's moments would move them. FBGEMM fuses
#: exactly these two into its CPU kernels.
SPARSE_OPTIMIZERS = ("sgd", "adagrad")


def make_optimizer(kind: str, learning_rate: float, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=learning_rate)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=learning_rate)
    return torch.optim.Adagrad(params, lr=learning_rate)


def torchrec_problem() -> str | None:
    """None where TorchRec and FBGEMM load in this process; else why not, in one line."""
    try:
        import trainer.torchrec_model  # noqa: F401 (imports torchrec, which loads FBGEMM's operators)
    except (ImportError, OSError, RuntimeError) as err:  # a wheel built for another torch: OSError, undefined symbol
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return None


def _fbgemm_version() -> str:
    for name in ("fbgemm-gpu", "fbgemm-gpu-cpu"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "fbgemm-gpu (version unknown)"


def choose(choice: Implementation) -> tuple[str, str]:
    """("torchrec" or "torch", the line that says why), refusing ``torchrec`` where it does not load."""
    if choice == "torch":
        return "torch", "pure-torch DLRM (--model torch)"
    problem = torchrec_problem()
    if problem is None:
        return "torchrec", f"TorchRec DLRM (torchrec {importlib.metadata.version('torchrec')}, {_fbgemm_version()})"
    if choice == "torchrec":
        raise ConfigError(f"--model torchrec: TorchRec does not load here ({problem}); `make install` installs it "
                          "with FBGEMM pinned to torch (see the README's TorchRec pins), or use --model torch")  # fmt: skip
    return "torch", f"pure-torch DLRM (TorchRec does not load here: {problem})"


def build_model(shape: ModelShape, choice: Implementation, *, optimizer: str, learning_rate: float, world_size: int,
                device: torch.device, seed: int = 0, shard_embeddings: bool = False,
                ) -> tuple[torch.nn.Module, torch.optim.Optimizer, str]:  # fmt: skip
    """The model on ``device``, its optimizer and the start-up line naming both. Embedding updates are sparse
    (pure torch: sparse gradients; TorchRec: FBGEMM's fused optimizer) with SGD or Adagrad on one rank;
    DistributedDataParallel's all-reduce takes dense gradients only. Either implementation starts from the same
    weights for the same ``seed`` (``trainer.model.initialize``). ``shard_embeddings`` (under torchrun):
    TorchRec's DistributedModelParallel, each table on one rank (``trainer/sharded.py``)."""
    if shard_embeddings:
        if choice == "torch":
            raise ConfigError("--shard-embeddings with --model torch: sharding is TorchRec's "
                              "DistributedModelParallel; use --model torchrec (or auto)")  # fmt: skip
        implementation, why = choose("torchrec")
        from trainer.sharded import sharded_model

        return sharded_model(shape, optimizer=optimizer, learning_rate=learning_rate, world_size=world_size,
                             device=device, why=why)  # fmt: skip
    implementation, why = choose(choice)
    sparse = optimizer in SPARSE_OPTIMIZERS and world_size == 1
    shape = dataclasses.replace(shape, sparse_gradients=sparse)
    if implementation == "torch":
        if sparse:  # torch's default, said explicitly: Adagrad's sparse steps otherwise warn about it every run
            torch.sparse.check_sparse_tensor_invariants.disable()
        model = DLRM(shape, seed=seed).to(device)
        tables = "sparse gradients" if sparse else "dense gradients"
        return model, make_optimizer(optimizer, learning_rate, model.parameters()), f"model: {why}, {tables}"
    from trainer.torchrec_model import JointOptimizer, TorchRecDLRM, dense_parameters

    model = TorchRecDLRM(shape, fused=(optimizer, learning_rate) if sparse else None, seed=seed, device=device)
    if not sparse:
        return model, make_optimizer(optimizer, learning_rate, model.parameters()), f"model: {why}, dense gradients"
    joint = JointOptimizer(make_optimizer(optimizer, learning_rate, dense_parameters(model)),
                           model.collection.fused_optimizer())  # fmt: skip
    return model, joint, f"model: {why}, tables updated by FBGEMM's fused {optimizer} in the backward pass"
