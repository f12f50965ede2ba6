"""Model-parallel embeddings: TorchRec's DistributedModelParallel over the ranks of a ``torchrun`` job.

    torchrun --nproc_per_node 2 -m trainer.train --job J --shard-embeddings

Each table lives on one rank (table-wise sharding, from TorchRec's planner: the plan is printed); the
ranks still read disjoint shares of the rows, as in data parallel training, and the sharded
``EmbeddingBagCollection`` sends each id to the rank that holds its table and the pooled rows back
(all-to-all, gloo on CPU, nccl on GPU). The tables are updated in the backward pass by FBGEMM's fused
optimizer (``apply_optimizer_in_backward``), so only touched rows move; the dense layers are replicated
under DistributedDataParallel, which DistributedModelParallel wraps them in itself. A rank's checkpoint
holds its own shards of the tables (ShardedTensor) and the dense layers.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torchrec.distributed.model_parallel import DistributedModelParallel, get_default_sharders
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.types import ShardingType
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

from ingest.batch import Batch
from schemas.errors import ConfigError
from trainer.model import ModelShape
from trainer.models import make_optimizer
from trainer.torchrec_model import FUSED, JointOptimizer, TorchRecDLRM, table_name


TABLES = "dlrm.sparse_arch.embedding_bag_collection."  # the tables' parameter names start so


class ShardedDLRM(DistributedModelParallel):
    """DistributedModelParallel over :class:`TorchRecDLRM`, with the trainer's model interface."""

    implementation = "torchrec-sharded"

    def check_ids(self, batch: Batch) -> None:
        self.module.check_ids(batch)

    def owners(self) -> dict[str, list[int]]:
        """Each sparse key's table: the ranks holding its shards."""
        plan = self.plan.plan[TABLES.rstrip(".")]
        return {key: sorted({shard.placement.rank() for shard in plan[table_name(key)].sharding_spec.shards})
                for key in self.module.shape.sparse_keys}  # fmt: skip


def sharded_model(shape: ModelShape, *, optimizer: str, learning_rate: float, world_size: int, device: torch.device,
                  why: str) -> tuple[ShardedDLRM, JointOptimizer, str]:  # fmt: skip
    if world_size < 2 or not dist.is_initialized():
        raise ConfigError("--shard-embeddings puts each table on one rank: run under torchrun with 2 or more "
                          "processes (torchrun --nproc_per_node 2 -m trainer.train ...)")  # fmt: skip
    if optimizer not in FUSED:
        raise ConfigError(f"--shard-embeddings with optimizer {optimizer}: the sharded tables are updated by "
                          f"FBGEMM's fused optimizer, which has {' and '.join(FUSED)} on the CPU; set train.optimizer "
                          "to one of them or train data parallel (without --shard-embeddings)")  # fmt: skip
    model = TorchRecDLRM(shape, device=device, tables_device=torch.device("meta"))
    kind, kwargs = FUSED[optimizer]
    apply_optimizer_in_backward(kind, model.collection.parameters(), {"lr": learning_rate, **kwargs})
    constraints = {table_name(key): ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE.value])
                   for key in shape.sparse_keys}  # fmt: skip
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=world_size, compute_device=device.type),
                                       constraints=constraints)  # fmt: skip
    plan = planner.collective_plan(model, get_default_sharders(), dist.GroupMember.WORLD)
    sharded = ShardedDLRM(model, device=device, plan=plan)
    dense = [p for name, p in sharded.named_parameters() if not name.startswith(TABLES)]
    joint = JointOptimizer(make_optimizer(optimizer, learning_rate, dense), sharded.fused_optimizer)
    where = ", ".join(f"{key} on rank {ranks[0]}" for key, ranks in sharded.owners().items())
    return sharded, joint, (f"model: {why}, tables sharded table-wise over {world_size} ranks by "
                            f"DistributedModelParallel ({where}), updated by FBGEMM's fused {optimizer}")  # fmt: skip
