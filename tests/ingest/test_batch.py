"""Batch: the KeyedJaggedTensor layout from per-feature columns, moves between devices, and to_kjt."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest
import torch

from ingest.batch import Batch
from ingest.block import make_batch
from ingest.transforms import SparseColumn, apply_sparse, parse_transforms
from schemas.errors import ConfigError
from schemas.registry import Feature

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; no GPU here")


def sparse(lists, weights=None, keep=None) -> SparseColumn:
    values = np.array([i for row in lists for i in row], dtype=np.int64)
    flat_weights = None if weights is None else np.array([w for row in weights for w in row], dtype=np.float32)
    return SparseColumn(values, np.array([len(r) for r in lists], dtype=np.int32), flat_weights,
                        None if keep is None else np.array(keep))  # fmt: skip


def docstring_batch() -> Batch:
    """The two-key, three-row example drawn in Batch's docstring."""
    return make_batch(
        {"ctr": np.array([0.1, 0.2, 0.3]), "price": np.array([1.0, 2.0, 3.0], dtype=np.float32)},
        {"topics": sparse([[7, 9], [], [4]]),
         "regions": sparse([[1], [2, 3], [5]], weights=[[0.5], [0.2, 0.3], [0.9]])},
        {"click": np.array([1, 0, 1]), "conversion": np.array([0.0, 0.0, 1.0])},
    )  # fmt: skip


def test_make_batch_lays_sparse_keys_out_key_major():
    batch = docstring_batch()
    assert len(batch) == 3
    assert batch.sparse_keys == ("topics", "regions")
    assert batch.values.dtype == torch.int64 and batch.values.tolist() == [7, 9, 4, 1, 2, 3, 5]
    assert batch.lengths.dtype == torch.int32 and batch.lengths.tolist() == [2, 0, 1, 1, 2, 1]
    assert batch.offsets.dtype == torch.int64 and batch.offsets.tolist() == [0, 2, 2, 3, 4, 6, 7]
    assert batch.weights.dtype == torch.float32
    assert batch.weights.tolist() == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.2, 0.3, 0.9])
    assert batch.dense_keys == ("ctr", "price") and batch.dense.dtype == torch.float32
    assert torch.equal(batch.dense, torch.tensor([[0.1, 1.0], [0.2, 2.0], [0.3, 3.0]], dtype=torch.float32))
    assert batch.label_keys == ("click", "conversion")
    assert batch.labels.dtype == torch.float32 and batch.labels.tolist() == [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]


def test_weights_are_none_without_a_weighted_key_and_empty_parts_keep_their_rows():
    batch = make_batch({}, {"topics": sparse([[1], [2, 3]])}, {"click": np.array([0, 1])})
    assert batch.weights is None and batch.dense.shape == (2, 0) and batch.dense_keys == ()
    assert batch.offsets.tolist() == [0, 1, 3]
    dense_only = make_batch({"x": np.array([1.0, 2.0])}, {}, {"click": np.array([0, 1])})
    assert len(dense_only) == 2 and dense_only.values.shape == (0,) and dense_only.lengths.shape == (0,)
    assert dense_only.offsets.tolist() == [0]


def test_drop_empty_rows_leave_every_column():
    batch = make_batch(
        {"x": np.array([1.0, 2.0, 3.0, 4.0])},
        {"a": sparse([[1], [], [2], [3, 4]], keep=[True, False, True, True]),
         "b": sparse([[5], [6], [7, 8], []], weights=[[0.5], [0.6], [0.7, 0.8], []], keep=[True, True, True, False])},
        {"click": np.array([1, 0, 0, 1])},
    )  # fmt: skip
    assert len(batch) == 2
    assert batch.dense[:, 0].tolist() == [1.0, 3.0] and batch.labels[:, 0].tolist() == [1.0, 0.0]
    assert batch.values.tolist() == [1, 2, 5, 7, 8] and batch.lengths.tolist() == [1, 1, 1, 2]
    assert batch.weights.tolist() == pytest.approx([1.0, 1.0, 0.5, 0.7, 0.8])


def test_columns_from_apply_sparse_build_a_batch():
    topics = Feature(name="topics", kind="sparse", dtype="int64", description="d", owner="o")
    transforms = parse_transforms(topics, [{"truncate": 1}, "drop_empty"], source="job.yaml")
    column = apply_sparse(pa.array([[3, 4], None, [5]], pa.list_(pa.int64())), transforms)
    batch = make_batch({}, {"topics": column}, {"click": np.array([1, 1, 0])})
    assert batch.values.tolist() == [3, 5] and batch.lengths.tolist() == [1, 1]
    assert batch.labels[:, 0].tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("dense", "columns", "labels", "message"),
    [
        ({"x": np.zeros(3)}, {"a": sparse([[1], [2]])}, {"click": np.zeros(3)},
         r"make_batch columns differ in row count \(dense 'x': 3, sparse 'a': 2, label 'click': 3\)"),
        ({}, {}, {}, r"make_batch got no columns"),
        ({"x": np.zeros((3, 2))}, {}, {"click": np.zeros(3)},
         r"column 'x' has shape \(3, 2\); dense and label columns are 1-D"),
    ],
)  # fmt: skip
def test_make_batch_refuses_mismatched_columns(dense, columns, labels, message):
    with pytest.raises(ConfigError, match=message):
        make_batch(dense, columns, labels)


def test_sparse_column_refuses_lengths_that_disagree_with_values():
    with pytest.raises(ConfigError, match=r"sparse column has 2 values but its lengths add up to 3"):
        SparseColumn(np.array([1, 2]), np.array([1, 2], dtype=np.int32))
    with pytest.raises(ConfigError, match=r"sparse column has 2 ids but 1 weights"):
        SparseColumn(np.array([1, 2]), np.array([2], dtype=np.int32), np.array([1.0], dtype=np.float32))


def test_batch_refuses_inconsistent_shapes():
    good = docstring_batch()
    with pytest.raises(ConfigError, match=r"batch lengths has shape \(5,\), expected \(6,\)"):
        Batch(good.dense, good.dense_keys, good.sparse_keys, good.values, good.lengths[:5], good.weights, good.labels,
              good.label_keys)  # fmt: skip


def test_to_cpu_keeps_every_tensor_and_key():
    batch = docstring_batch()
    moved = batch.to("cpu")
    assert moved.values.device.type == "cpu" and moved.sparse_keys == batch.sparse_keys
    for name in ("dense", "values", "lengths", "weights", "labels"):
        assert torch.equal(getattr(moved, name), getattr(batch, name))
        assert getattr(moved, name).dtype == getattr(batch, name).dtype
    assert batch.to(torch.device("cpu"), non_blocking=True).offsets.tolist() == [0, 2, 2, 3, 4, 6, 7]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_pin_memory_is_a_no_op_without_cuda():
    batch = docstring_batch()
    assert batch.pin_memory() is batch


@pytest.mark.gpu
@gpu
def test_pin_memory_and_to_cuda():
    pinned = docstring_batch().pin_memory()
    assert all(t.is_pinned() for t in (pinned.dense, pinned.values, pinned.lengths, pinned.weights, pinned.labels))
    on_gpu = pinned.to("cuda", non_blocking=True)
    assert on_gpu.values.device.type == "cuda" and on_gpu.offsets.device.type == "cuda"
    assert on_gpu.offsets.cpu().tolist() == [0, 2, 2, 3, 4, 6, 7]
    assert on_gpu.to("cpu").weights.tolist() == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.2, 0.3, 0.9])


def test_to_kjt_without_torchrec_says_how_to_install(monkeypatch):
    for name in ("torchrec", "torchrec.sparse", "torchrec.sparse.jagged_tensor"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"^torchrec is not installed; `make install` installs it") as info:
        docstring_batch().to_kjt()
    assert isinstance(info.value.__cause__, ImportError)


def real_torchrec():
    """torchrec's jagged_tensor and EmbeddingBagCollection modules: `make install` installs them with FBGEMM, pinned
    with torch (the Makefile's FBGEMM_VERSION and TORCHREC_VERSION), so this never skips."""
    from torchrec.modules import embedding_configs, embedding_modules
    from torchrec.sparse import jagged_tensor

    return jagged_tensor, embedding_configs, embedding_modules


def test_a_batch_feeds_a_real_torchrec_embedding_bag_collection():
    jagged_tensor, configs, modules = real_torchrec()
    batch = docstring_batch()
    kjt, dense = batch.to_kjt(), batch.to_keyed_tensor()
    assert isinstance(kjt, jagged_tensor.KeyedJaggedTensor) and isinstance(dense, jagged_tensor.KeyedTensor)
    assert kjt.values().data_ptr() == batch.values.data_ptr()  # the same storage: nothing copied
    assert kjt.lengths().data_ptr() == batch.lengths.data_ptr() and kjt.weights().data_ptr() == batch.weights.data_ptr()
    assert dense.values().data_ptr() == batch.dense.data_ptr() and dense.keys() == ["ctr", "price"]
    assert torch.equal(dense["price"], batch.dense[:, 1:2])
    assert kjt.to_dict()["regions"].values().tolist() == [1, 2, 3, 5]
    tables = [configs.EmbeddingBagConfig(name=f"t_{key}", embedding_dim=4, num_embeddings=10, feature_names=[key])
              for key in batch.sparse_keys]  # fmt: skip
    ebc = modules.EmbeddingBagCollection(tables=tables, is_weighted=True, device=torch.device("cpu"))
    pooled = ebc(kjt)
    assert pooled.values().shape == (3, 8)
    weight = ebc.embedding_bags["t_regions"].weight
    expected = 0.2 * weight[2] + 0.3 * weight[3]  # row 1 of regions: ids 2 and 3, weights .2 and .3, summed
    assert torch.allclose(pooled["regions"][1], expected)
