"""DLRM from TorchRec: the reader's batch as a ``KeyedJaggedTensor`` (over the batch's own tensors) into an
``EmbeddingBagCollection`` inside TorchRec's ``DLRM`` or ``DLRM_DCN``. Needs FBGEMM (``fbgemm-gpu-cpu`` or
``fbgemm-gpu``); ``trainer/models.py`` falls back to the pure-torch model where it does not load.

Sparse updates stay sparse: with SGD or Adagrad on one rank the tables are a ``FusedEmbeddingBagCollection``,
whose FBGEMM kernel applies the optimizer to the rows a batch touched inside the backward pass (the tables get
no ``.grad``); ``JointOptimizer`` steps the dense layers with the job's torch optimizer beside it. Elsewhere
(Adam, which FBGEMM's CPU kernels lack, or several ranks under DistributedDataParallel, which all-reduces dense
gradients) the tables are a plain ``EmbeddingBagCollection`` trained by the job's optimizer, as the pure-torch
model does there.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection

from ingest.batch import Batch
from trainer.model import DLRM as TorchDLRM
from trainer.model import ModelShape, check_batch_keys, check_ids, initialize, linears

_POOLING = {"sum": PoolingType.SUM, "mean": PoolingType.MEAN}
#: The job's optimizer as FBGEMM's fused one, with torch's defaults where FBGEMM's differ (Adagrad's eps).
FUSED = {"sgd": (torch.optim.SGD, {}), "adagrad": (torch.optim.Adagrad, {"eps": 1e-10})}


def table_name(key: str) -> str:
    return f"t_{key}"


class TorchRecDLRM(nn.Module):
    """TorchRec's DLRM (``interaction: dcn``: DLRM_DCN) behind the pure-torch model's interface: ``model(batch)``
    gives logits float32[B, L]. ``fused``: (optimizer name, learning rate) for FBGEMM's fused tables, or None.
    ``seed``: the initial weights, the pure-torch model's for the same seed (``trainer.model.initialize``)."""

    implementation = "torchrec"

    def __init__(self, shape: ModelShape, *, fused: tuple[str, float] | None = None, seed: int | None = None,
                 device: torch.device | None = None, tables_device: torch.device | None = None) -> None:  # fmt: skip
        super().__init__()
        self.shape = shape
        device = device or torch.device("cpu")
        tables = [EmbeddingBagConfig(num_embeddings=rows, embedding_dim=shape.embedding_dim, name=table_name(key),
                                     feature_names=[key], pooling=_POOLING[shape.pooling_of(k)])
                  for k, (key, rows) in enumerate(zip(shape.sparse_keys, shape.table_rows, strict=True))]  # fmt: skip
        if fused is not None:
            kind, lr = fused
            optimizer, kwargs = FUSED[kind]
            ebc = FusedEmbeddingBagCollection(tables=tables, optimizer_type=optimizer,
                                              optimizer_kwargs={"lr": lr, **kwargs}, is_weighted=shape.weighted,
                                              device=device)  # fmt: skip
        else:
            ebc = EmbeddingBagCollection(tables=tables, is_weighted=shape.weighted, device=tables_device or device)
        self.fused = fused is not None
        sizes = {"dense_in_features": len(shape.dense_keys),
                 "dense_arch_layer_sizes": [*shape.bottom_mlp, shape.embedding_dim],
                 "over_arch_layer_sizes": [*shape.top_mlp, len(shape.labels)], "dense_device": device}  # fmt: skip
        if shape.interaction == "dcn":
            self.dlrm = DLRM_DCN(ebc, dcn_num_layers=shape.dcn_layers, dcn_low_rank_dim=shape.dcn_low_rank, **sizes)
        else:
            self.dlrm = DLRM(ebc, **sizes)
        if (tables_device or device).type == "meta":  # tables to be sharded: each shard's owner initializes it
            return
        initialize(seed, bottom=linears(self.dlrm.dense_arch), tables=list(self.embedding_tables().values()),
                   crossnet=self.dlrm.inter_arch.crossnet if shape.interaction == "dcn" else None,
                   top=linears(self.dlrm.over_arch))  # fmt: skip

    @property
    def collection(self) -> EmbeddingBagCollection | FusedEmbeddingBagCollection:
        return self.dlrm.sparse_arch.embedding_bag_collection

    def embedding_tables(self) -> dict[str, torch.Tensor]:
        """Each sparse key's table (rows x embedding_dim), by key: FBGEMM's own storage where fused."""
        bags = self.collection.embedding_bags
        return {key: bags[table_name(key)].weight for key in self.shape.sparse_keys}

    def forward(self, batch: Batch) -> torch.Tensor:
        check_batch_keys(self.shape, batch)
        return self.dlrm(batch.dense, batch.to_kjt())

    def check_ids(self, batch: Batch) -> None:
        check_ids(self.shape, batch)


class JointOptimizer:
    """The dense layers' torch optimizer and the fused tables' FBGEMM one behind torch's optimizer interface.
    ``step`` and ``zero_grad`` act on the dense layers (the tables were updated in the backward pass); the state
    holds both, so a checkpoint resumes the tables' Adagrad sums too."""

    def __init__(self, dense: torch.optim.Optimizer, fused: Any) -> None:
        self.dense, self.fused = dense, fused

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.dense.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.dense.step()

    def state_dict(self) -> dict[str, Any]:
        return {"dense": self.dense.state_dict(), "fused": self.fused.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dense.load_state_dict(state["dense"])
        self.fused.load_state_dict(state["fused"])


def dense_parameters(model: TorchRecDLRM) -> list[nn.Parameter]:
    """The parameters a torch optimizer steps: all but fused tables'."""
    tables = {id(t) for t in model.embedding_tables().values()} if model.fused else set()
    return [p for p in model.parameters() if id(p) not in tables]


@torch.no_grad()
def copy_weights(source: TorchDLRM, target: TorchRecDLRM) -> None:
    """Give ``target`` the pure-torch model's weights, layer by layer (the two have the same layers in the same
    order; see trainer/model.py), so the two implementations can be compared step for step."""
    if source.shape != target.shape:
        raise ValueError(f"the models' shapes differ: {source.shape} and {target.shape}")
    pairs = [(source.bottom, target.dlrm.dense_arch), (source.top, target.dlrm.over_arch)]
    for mine, theirs in pairs:
        ours = [m for m in mine.modules() if isinstance(m, nn.Linear)]
        torchrec = [m for m in theirs.modules() if isinstance(m, nn.Linear)]
        for a, b in zip(ours, torchrec, strict=True):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
    if source.crossnet is not None:
        theirs = target.dlrm.inter_arch.crossnet
        for name in ("W_kernels", "V_kernels", "bias"):
            for a, b in zip(getattr(source.crossnet, name), getattr(theirs, name), strict=True):
                b.copy_(a)
    tables = target.embedding_tables()
    for key, weight in source.embedding_tables().items():
        tables[key].copy_(weight)
