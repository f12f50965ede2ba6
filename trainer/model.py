"""DLRM (Naumov et al., 2019) over the reader's :class:`~ingest.batch.Batch`.

    dense float32[B, D] --bottom MLP--> x0 [B, d]
    sparse key k (values, offsets) --EmbeddingBag k (sum)--> e_k [B, d]          k = 1..K
    T = [x0, e_1, ..., e_K]  [B, K+1, d];  Z = T T^T;  z = Z[i < j]  [B, (K+1)K/2]  (pairwise dots)
    [x0, z] --top MLP--> one logit per label type  [B, L]

Every size comes from the job spec (``model:``; a table's rows from the feature's ``hash`` or its
``embedding_rows``), never from strings to parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ingest.batch import Batch
from ingest.spec import JobSpec
from ingest.transforms import Hash, parse_transforms
from schemas.errors import ConfigError
from schemas.registry import DatasetRegistry, Kind


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
    #: Embedding gradients as sparse tensors (only the rows a batch touched), as the DLRM reference trains:
    #: a step then costs the batch's rows, not the tables' (Criteo's reference tables hold 33.8M rows).
    sparse_gradients: bool = False


def model_shape(spec: JobSpec, registry: DatasetRegistry) -> ModelShape:
    """The DLRM a job spec asks for; the keys in the order the reader's batches have them."""
    if spec.model is None:
        raise ConfigError(f"{spec.source}: no model: section; add e.g. model: {{embedding_dim: 16, "
                          "bottom_mlp: [64, 32], top_mlp: [64, 32]}")  # fmt: skip
    dense, sparse, rows, unhashed = [], [], [], False
    for wanted in spec.features:
        feature = registry.by_name[wanted.name]
        if feature.kind is Kind.DENSE:
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
        unhashed = unhashed or not hashes
    if not dense or not sparse:
        raise ConfigError(f"{spec.source}: DLRM needs at least one dense and one sparse feature; the job has "
                          f"{len(dense)} dense and {len(sparse)} sparse")  # fmt: skip
    m = spec.model
    return ModelShape(tuple(dense), tuple(sparse), tuple(rows), spec.labels, m.embedding_dim, m.bottom_mlp,
                      m.top_mlp, unhashed)  # fmt: skip


def _mlp(sizes: Sequence[int], *, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP, one sum-pooled EmbeddingBag per sparse key, pairwise dot interaction, top MLP."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape
        d = shape.embedding_dim
        self.bottom = _mlp([len(shape.dense_keys), *shape.bottom_mlp, d], last_activation=True)
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, d, mode="sum", sparse=shape.sparse_gradients)
                                        for rows in shape.table_rows)
        for bag in self.embeddings:  # as the DLRM reference does: torch's N(0, 1) makes sums of many ids explode
            bound = (1.0 / bag.num_embeddings) ** 0.5
            nn.init.uniform_(bag.weight, -bound, bound)
        features = len(shape.sparse_keys) + 1
        self.top = _mlp([d + features * (features - 1) // 2, *shape.top_mlp, len(shape.labels)], last_activation=False)
        pairs = torch.triu_indices(features, features, offset=1)
        self.register_buffer("_pairs", pairs, persistent=False)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits float32[B, L], one column per label type."""
        if batch.sparse_keys != self.shape.sparse_keys or batch.dense_keys != self.shape.dense_keys:
            raise ConfigError(f"batch keys {batch.dense_keys} / {batch.sparse_keys} are not the model's "
                              f"{self.shape.dense_keys} / {self.shape.sparse_keys}; read with the model's job spec")  # fmt: skip
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
        z = torch.bmm(t, t.transpose(1, 2))[:, self._pairs[0], self._pairs[1]]
        return self.top(torch.cat([x, z], dim=1))

    def check_ids(self, batch: Batch) -> None:
        """Refuse ids outside their table (only a feature without ``hash`` can have them), naming the feature."""
        offsets = batch.offsets
        rows = len(batch)
        for k, (name, size) in enumerate(zip(self.shape.sparse_keys, self.shape.table_rows, strict=True)):
            ids = batch.values[offsets[k * rows] : offsets[(k + 1) * rows]]
            if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= size):
                raise ConfigError(
                    f"sparse feature {name!r} has ids in [{int(ids.min())}, {int(ids.max())}] but its table has "
                    f"{size} rows; give it a {{hash: {size}}} transform or a larger embedding_rows"
                )
