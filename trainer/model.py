"""DLRM (Naumov et al., 2019) over the reader's :class:`~ingest.batch.Batch`: its shape from the job spec, and
the pure-torch implementation (``trainer/torchrec_model.py`` holds TorchRec's; ``trainer/models.py`` picks one).

    dense float32[B, D] --bottom MLP--> x0 [B, d]
    sparse key k (values, offsets) --EmbeddingBag k (sum or mean)--> e_k [B, d]    k = 1..K
    T = [x0, e_1, ..., e_K]  [B, K+1, d]
    dot: Z = T T^T;  z = Z[i < j]  [B, (K+1)K/2] (pairwise dots);  [x0, z] --top MLP--> logits [B, L]
    dcn: x = T flattened [B, (K+1)d];  x_{l+1} = x * (W_l V_l x_l + b_l) + x_l, l < dcn_layers  --top MLP-->

The layers are TorchRec's ``DLRM`` and ``DLRM_DCN`` (its ``DenseArch``, ``InteractionArch``,
``InteractionDCNArch`` with ``LowRankCrossNet``, ``OverArch``) in the same order, so the two implementations
compute the same function and train to the same loss from the same weights (tests/trainer/test_torchrec.py).
Every size comes from the job spec (``model:``; a table's rows from the feature's ``hash`` or its
``embedding_rows``), never from strings to parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import math

import torch
from torch import nn

from ingest.batch import Batch
from ingest.spec import JobSpec
from ingest.transforms import Hash, parse_transforms
from schemas.errors import ConfigError
from schemas.registry import DatasetRegistry, Kind

DCN_LAYERS, DCN_LOW_RANK = 3, 64  # interaction: dcn without dcn_layers / dcn_low_rank

@dataclass(frozen=True)
class ModelShape:
    dense_keys: tuple[str, ...]
    sparse_keys: tuple[str, ...]
    table_rows: tuple[int, ...]  # per sparse key
    labels: tuple[str, ...]
    embedding_dim: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    check_ids: bool = False  # some table is sized by embedding_rows, not by a hash: ids must be checked
    #: Embedding updates that touch only the rows a batch used, as the DLRM reference trains: a step then costs
    #: the batch's rows, not the tables' (Criteo's reference tables hold 33.8M rows). Pure torch: sparse
    #: gradients; TorchRec: FBGEMM's optimizer fused into the backward pass.
    sparse_gradients: bool = False
    pooling: tuple[str, ...] = ()  # per sparse key, "sum" or "mean"; () means sum for all
    weighted: bool = False  # some key is weighted_sparse: batches carry per-id weights
    interaction: str = "dot"  # or "dcn"
    dcn_layers: int = 0
    dcn_low_rank: int = 0

    def pooling_of(self, k: int) -> str:
        return self.pooling[k] if self.pooling else "sum"


def model_shape(spec: JobSpec, registry: DatasetRegistry) -> ModelShape:
    """The DLRM a job spec asks for; the keys in the order the reader's batches have them."""
    if spec.model is None:
        raise ConfigError(f"{spec.source}: no model: section; add e.g. model: {{embedding_dim: 16, "
                          "bottom_mlp: [64, 32], top_mlp: [64, 32]}")  # fmt: skip
    m = spec.model
    dense, sparse, rows, pooling, unhashed, weighted = [], [], [], [], False, False
    for wanted in spec.features:
        feature = registry.by_name[wanted.name]
        if feature.kind is Kind.DENSE:
            if wanted.pooling is not None:
                raise ConfigError(f"{spec.source}: feature {feature.name!r} is dense; pooling applies to sparse "
                                  "features only; drop it")  # fmt: skip
            dense.append(feature.name)
            continue
        hashes = [t for t in parse_transforms(feature, wanted.transforms, source=spec.source) if isinstance(t, Hash)]
        size = wanted.embedding_rows or (hashes[0].buckets if hashes else None)
        if size is None:
            raise ConfigError(
                f"{spec.source}: sparse feature {feature.name!r} has no embedding table size; give it a "
                "{hash: N} transform or embedding_rows: N (every id must then be below N)"
            )
        sparse.append(feature.name)
        rows.append(size)
        pooling.append(wanted.pooling or m.pooling)
        unhashed = unhashed or not hashes
        weighted = weighted or feature.kind is Kind.WEIGHTED_SPARSE
    if not dense or not sparse:
        raise ConfigError(f"{spec.source}: DLRM needs at least one dense and one sparse feature; the job has "
                          f"{len(dense)} dense and {len(sparse)} sparse")  # fmt: skip
    means = [name for name, pooled in zip(sparse, pooling, strict=True) if pooled == "mean"]
    if weighted and means:
        heavy = next(w.name for w in spec.features if registry.by_name[w.name].kind is Kind.WEIGHTED_SPARSE)
        raise ConfigError(f"{spec.source}: {', '.join(repr(n) for n in means)} pool by mean in a job with weighted "
                          f"features ({heavy!r}); per-id weights reach every table and need pooling: sum (torch's "
                          "EmbeddingBag and TorchRec's EmbeddingBagCollection take them with sum only); set "
                          "pooling: sum")  # fmt: skip
    dcn = m.interaction == "dcn"
    return ModelShape(tuple(dense), tuple(sparse), tuple(rows), spec.labels, m.embedding_dim, m.bottom_mlp,
                      m.top_mlp, unhashed, pooling=tuple(pooling), weighted=weighted, interaction=m.interaction,
                      dcn_layers=(m.dcn_layers or DCN_LAYERS) if dcn else 0,
                      dcn_low_rank=(m.dcn_low_rank or DCN_LOW_RANK) if dcn else 0)  # fmt: skip


def _mlp(sizes: Sequence[int], *, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LowRankCrossNet(nn.Module):
    """DCN-v2's low-rank cross layers, as TorchRec's ``LowRankCrossNet``: x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l."""

    def __init__(self, in_features: int, *, layers: int, low_rank: int) -> None:
        super().__init__()
        self.W_kernels = nn.ParameterList(nn.Parameter(nn.init.xavier_normal_(torch.empty(in_features, low_rank)))
                                          for _ in range(layers))  # fmt: skip
        self.V_kernels = nn.ParameterList(nn.Parameter(nn.init.xavier_normal_(torch.empty(low_rank, in_features)))
                                          for _ in range(layers))  # fmt: skip
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(in_features)) for _ in range(layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for w, v, b in zip(self.W_kernels, self.V_kernels, self.bias, strict=True):
            x = x0 * (nn.functional.linear(nn.functional.linear(x, v), w) + b) + x
        return x


def check_batch_keys(shape: ModelShape, batch: Batch) -> None:
    if batch.sparse_keys != shape.sparse_keys or batch.dense_keys != shape.dense_keys:
        raise ConfigError(f"batch keys {batch.dense_keys} / {batch.sparse_keys} are not the model's "
                          f"{shape.dense_keys} / {shape.sparse_keys}; read with the model's job spec")  # fmt: skip


def check_ids(shape: ModelShape, batch: Batch) -> None:
    """Refuse ids outside their table (only a feature without ``hash`` can have them), naming the feature."""
    offsets = batch.offsets
    rows = len(batch)
    for k, (name, size) in enumerate(zip(shape.sparse_keys, shape.table_rows, strict=True)):
        ids = batch.values[offsets[k * rows] : offsets[(k + 1) * rows]]
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= size):
            raise ConfigError(
                f"sparse feature {name!r} has ids in [{int(ids.min())}, {int(ids.max())}] but its table has "
                f"{size} rows; give it a {{hash: {size}}} transform or a larger embedding_rows"
            )


@torch.no_grad()
def initialize(seed: int | None, *, bottom: Sequence[nn.Linear], tables: Sequence[torch.Tensor],
               crossnet: nn.Module | None, top: Sequence[nn.Linear]) -> None:  # fmt: skip
    """A DLRM's initial weights from ``seed`` alone, drawn in this order with a generator of their own, so that
    both implementations start from the same weights for the same seed, whatever their constructors drew:
    Linear layers as torch's default (weight and bias uniform in +-1/sqrt(fan_in)), each table uniform in
    +-sqrt(1/rows) (the DLRM reference's and TorchRec's: torch's N(0, 1), summed over dozens of ids, drowns the
    dense signal), the cross network's kernels Xavier-normal and its biases zero (TorchRec's LowRankCrossNet).
    ``crossnet``: ours or TorchRec's LowRankCrossNet (the same parameter names), or None. ``seed`` None draws one
    from torch's global generator. CPU tensors are drawn in place; others on the CPU and copied."""
    generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())) if seed is None else seed)

    def draw(t: torch.Tensor, fill) -> None:
        if t.device.type == "cpu":
            fill(t)
        else:
            cpu = torch.empty(t.shape, dtype=t.dtype)
            fill(cpu)
            t.copy_(cpu)

    def uniform(t: torch.Tensor, bound: float) -> None:
        draw(t, lambda x: x.uniform_(-bound, bound, generator=generator))

    def layer(linear: nn.Linear) -> None:
        bound = 1 / math.sqrt(linear.in_features)
        uniform(linear.weight, bound)
        uniform(linear.bias, bound)

    for linear in bottom:
        layer(linear)
    for table in tables:
        uniform(table, math.sqrt(1 / table.shape[0]))
    w_kernels, v_kernels, biases = ((), (), ()) if crossnet is None else (crossnet.W_kernels, crossnet.V_kernels,
                                                                           crossnet.bias)  # fmt: skip
    for kernel in (*w_kernels, *v_kernels):
        std = math.sqrt(2 / (kernel.shape[0] + kernel.shape[1]))
        draw(kernel, lambda x, std=std: x.normal_(0, std, generator=generator))
    for bias in biases:
        bias.zero_()
    for linear in top:
        layer(linear)


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


class DLRM(nn.Module):
    """The pure-torch DLRM: bottom MLP, one EmbeddingBag per sparse key, dot or DCN interaction, top MLP."""

    implementation = "torch"

    def __init__(self, shape: ModelShape, *, seed: int | None = None) -> None:
        """``seed``: the initial weights' (see :func:`initialize`); None draws one from torch's global generator."""
        super().__init__()
        self.shape = shape
        d = shape.embedding_dim
        self.bottom = _mlp([len(shape.dense_keys), *shape.bottom_mlp, d], last_activation=True)
        self.embeddings = nn.ModuleList(  # _weight: no N(0, 1) draw of every table that initialize() replaces
            nn.EmbeddingBag(rows, d, mode=shape.pooling_of(k), sparse=shape.sparse_gradients,
                            _weight=torch.empty(rows, d))
            for k, rows in enumerate(shape.table_rows))  # fmt: skip
        features = len(shape.sparse_keys) + 1
        if shape.interaction == "dcn":
            self.crossnet = LowRankCrossNet(features * d, layers=shape.dcn_layers, low_rank=shape.dcn_low_rank)
            top_in = features * d
        else:
            self.crossnet = None
            top_in = d + features * (features - 1) // 2
        self.top = _mlp([top_in, *shape.top_mlp, len(shape.labels)], last_activation=False)
        pairs = torch.triu_indices(features, features, offset=1)
        self.register_buffer("_pairs", pairs, persistent=False)
        initialize(seed, bottom=linears(self.bottom), tables=[bag.weight for bag in self.embeddings],
                   crossnet=self.crossnet, top=linears(self.top))  # fmt: skip

    def embedding_tables(self) -> dict[str, torch.Tensor]:
        """Each sparse key's table (rows x embedding_dim), by key."""
        return {key: bag.weight for key, bag in zip(self.shape.sparse_keys, self.embeddings, strict=True)}

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits float32[B, L], one column per label type."""
        check_batch_keys(self.shape, batch)
        rows = len(batch)
        x = self.bottom(batch.dense)
        offsets = batch.offsets
        pooled = [x]
        for k, bag in enumerate(self.embeddings):
            start, stop = offsets[k * rows], offsets[(k + 1) * rows]
            ids = batch.values[start:stop]
            weights = None if batch.weights is None else batch.weights[start:stop]
            pooled.append(bag(ids, offsets[k * rows : (k + 1) * rows] - start, per_sample_weights=weights))
        t = torch.stack(pooled, dim=1)  # [B, K+1, d]
        if self.crossnet is not None:
            return self.top(self.crossnet(t.reshape(rows, -1)))
        z = torch.bmm(t, t.transpose(1, 2))[:, self._pairs[0], self._pairs[1]]
        return self.top(torch.cat([x, z], dim=1))

    def check_ids(self, batch: Batch) -> None:
        check_ids(self.shape, batch)
