"""DLRM's shape from a job spec, its forward pass over a Batch, and the refusals that name the fix."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ingest.block import make_batch
from ingest.spec import parse_spec
from ingest.transforms import SparseColumn
from schemas.errors import ConfigError
from schemas.registry import parse_registry
from trainer.model import DLRM, model_shape

REGISTRY = parse_registry({
    "dataset": "m", "labels": [{"name": "click", "window": "1h"}, {"name": "conversion", "window": "1d"}],
    "features": [
        *({"name": f"d{i}", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o"} for i in range(3)),
        {"name": "a_ids", "kind": "sparse", "dtype": "int64", "default": [], "description": "a", "owner": "o"},
        {"name": "b_ids", "kind": "weighted_sparse", "dtype": "int64", "default": [], "description": "b", "owner": "o"},
    ],
}, source="inline")  # fmt: skip


def spec(features, model=None):
    return parse_spec({"job_id": "m", "dataset": "m", "ds": ["2026-11-01"], "features": features,
                       "labels": ["click", "conversion"],
                       "model": model or {"embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8]}}, source="job.yaml")  # fmt: skip


FEATURES = [{"name": "d0"}, {"name": "a_ids", "transforms": [{"hash": 100}]}, {"name": "d1"},
            {"name": "b_ids", "embedding_rows": 7}]  # fmt: skip


def batch(rows: int = 3):
    rng = np.random.default_rng(0)
    lengths = np.array([2, 0, 1][:rows], dtype=np.int32)
    return make_batch(
        {"d0": rng.random(rows), "d1": rng.random(rows)},
        {"a_ids": SparseColumn(np.array([5, 99, 42][: lengths.sum()], np.int64), lengths),
         "b_ids": SparseColumn(np.array([6, 0, 3][:rows], np.int64), np.ones(rows, np.int32),
                               np.array([0.5, 1.0, 2.0][:rows], np.float32))},
        {"click": np.zeros(rows), "conversion": np.zeros(rows)},
    )  # fmt: skip


def test_the_shape_follows_the_spec_and_the_forward_pass_gives_one_logit_per_label():
    shape = model_shape(spec(FEATURES), REGISTRY)
    assert (shape.dense_keys, shape.sparse_keys, shape.table_rows) == (("d0", "d1"), ("a_ids", "b_ids"), (100, 7))
    assert shape.check_ids  # b_ids is sized by embedding_rows, not a hash
    torch.manual_seed(0)
    model = DLRM(shape)
    assert model.top[0].in_features == 4 + 3  # bottom output + 3 pairwise dots of (x, a, b)
    assert all(bag.weight.abs().max() <= (1 / bag.num_embeddings) ** 0.5 for bag in model.embeddings)
    logits = model(batch())
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert model.embeddings[1].weight.grad[[6, 0, 3]].abs().sum() > 0  # weighted ids got gradients


def test_an_empty_list_pools_to_zero_and_weights_scale_their_ids():
    torch.manual_seed(0)
    model = DLRM(model_shape(spec(FEATURES), REGISTRY))
    b = batch()
    pooled_a = model.embeddings[0](b.values[:3], b.offsets[:3])
    assert torch.equal(pooled_a[1], torch.zeros(4))
    pooled_b = model.embeddings[1](b.values[3:], b.offsets[3:6] - 3, per_sample_weights=b.weights[3:])
    assert torch.allclose(pooled_b[0], 0.5 * model.embeddings[1].weight[6])


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.Adagrad])
def test_sparse_embedding_gradients_train_exactly_as_dense_ones(optimizer):
    """The trainer's sparse gradients (sgd, adagrad) change the same rows by the same amounts as dense ones."""
    shape = model_shape(spec(FEATURES), REGISTRY)
    models = []
    for sparse in (False, True):
        torch.manual_seed(0)
        model = DLRM(dataclasses.replace(shape, sparse_gradients=sparse))
        step = optimizer(model.parameters(), lr=0.1)
        for _ in range(3):
            step.zero_grad(set_to_none=True)
            torch.nn.functional.binary_cross_entropy_with_logits(model(batch()), torch.ones(3, 2)).backward()
            step.step()
        models.append(model)
    dense, sparse = (dict(m.named_parameters()) for m in models)
    assert models[1].embeddings[0].weight.grad.is_sparse and not models[0].embeddings[0].weight.grad.is_sparse
    for name, value in dense.items():
        torch.testing.assert_close(sparse[name], value, rtol=1e-6, atol=1e-7, msg=name)
    torch.manual_seed(0)
    initial = DLRM(shape).embeddings[0].weight
    moved = (sparse["embeddings.0.weight"] != initial).any(dim=1).nonzero().flatten().tolist()
    assert moved == [5, 42, 99]  # the ids of a_ids in the batch, and no other row


def test_refusals_name_the_feature_and_the_fix():
    with pytest.raises(ConfigError, match=r"sparse feature 'a_ids' has no embedding table size; give it a \{hash: N\}"):
        model_shape(spec([{"name": "d0"}, {"name": "a_ids"}]), REGISTRY)
    with pytest.raises(ConfigError, match=r"DLRM needs at least one dense and one sparse feature; the job has 2 dense"):
        model_shape(spec([{"name": "d0"}, {"name": "d1"}]), REGISTRY)
    no_model = parse_spec({"job_id": "m", "dataset": "m", "ds": ["2026-11-01"], "features": FEATURES,
                           "labels": ["click"]}, source="job.yaml")  # fmt: skip
    with pytest.raises(ConfigError, match=r"job.yaml: no model: section; add e.g. model:"):
        model_shape(no_model, REGISTRY)
    model = DLRM(model_shape(spec([*FEATURES[:3], {"name": "b_ids", "embedding_rows": 5}]), REGISTRY))
    with pytest.raises(ConfigError, match=r"sparse feature 'b_ids' has ids in \[0, 6\] but its table has 5 rows"):
        model.check_ids(batch())
