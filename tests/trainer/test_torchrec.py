"""TorchRec's model against the pure-torch one: the KeyedJaggedTensor over the batch's own storage, the
EmbeddingBagCollection against a hand computation, the same losses and updated rows from the same weights,
the checkpoint's refusals and the start-up choice. Real TorchRec and FBGEMM (CPU): `make install` pins them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from schemas.errors import ConfigError
from tests.trainer.test_model import FEATURES, REGISTRY, batch, spec
from trainer.checkpoint import Checkpoint, save_checkpoint
from trainer.model import model_shape
from trainer.models import build_model, choose
from trainer.torchrec_model import TorchRecDLRM, copy_weights

CPU = torch.device("cpu")


def shape_of(**model):
    return model_shape(spec(FEATURES, {"embedding_dim": 4, "bottom_mlp": [8], "top_mlp": [8], **model}), REGISTRY)


def test_torchrec_loads_here_and_is_the_default():
    implementation, line = choose("auto")
    assert implementation == "torchrec", line
    assert "torchrec 1.9.2" in line and "fbgemm-gpu" in line


def test_the_keyed_jagged_tensor_shares_the_batch_storage():
    b = batch()
    kjt = b.to_kjt()
    assert kjt.keys() == ["a_ids", "b_ids"]
    for theirs, ours in ((kjt.values(), b.values), (kjt.lengths(), b.lengths), (kjt.weights(), b.weights)):
        assert theirs.data_ptr() == ours.data_ptr() and torch.equal(theirs, ours)
    assert kjt["a_ids"].values().tolist() == [5, 99, 42] and kjt["a_ids"].lengths().tolist() == [2, 0, 1]


@pytest.mark.parametrize("fused", [False, True], ids=["EmbeddingBagCollection", "FusedEmbeddingBagCollection"])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_the_embedding_bags_equal_a_hand_computation(fused, pooling):
    """a_ids: row 0 holds ids 5 and 99, row 1 none, row 2 id 42. With b_ids (weighted: one id a row, weights
    0.5, 1.0, 2.0) when summing; a mean-pooled job has no weighted feature."""
    if pooling == "sum":
        features, b = FEATURES, batch()
    else:
        features = [{"name": "d0"}, {"name": "a_ids", "transforms": [{"hash": 100}], "pooling": "mean"}]
        full = batch()
        b = dataclasses.replace(full, dense=full.dense[:, :1], dense_keys=("d0",), sparse_keys=("a_ids",),
                                values=full.values[:3], lengths=full.lengths[:3], weights=None)  # fmt: skip
    model = TorchRecDLRM(model_shape(spec(features), REGISTRY), fused=("sgd", 0.1) if fused else None)
    pooled = model.collection(b.to_kjt()).to_dict()
    tables = {k: t.detach() for k, t in model.embedding_tables().items()}
    a = tables["a_ids"]
    first = (a[5] + a[99]) / (2 if pooling == "mean" else 1)
    torch.testing.assert_close(pooled["a_ids"], torch.stack([first, torch.zeros(4), a[42]]))
    if pooling == "sum":
        w = tables["b_ids"]
        torch.testing.assert_close(pooled["b_ids"], torch.stack([0.5 * w[6], 1.0 * w[0], 2.0 * w[3]]))


def two_steps(model, optimizer) -> list[float]:
    losses = []
    for labels in ([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]):
        b = dataclasses.replace(batch(), labels=torch.tensor(labels))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(b), b.labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("interaction", ["dot", "dcn"])
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_torchrec_and_pure_torch_train_to_the_same_loss_from_the_same_weights(optimizer, interaction):
    """SGD and Adagrad: FBGEMM's fused update of the touched rows against torch's sparse gradients; Adam: both
    with dense gradients. Rows 5, 99, 42 of a_ids and 6, 0, 3 of b_ids move; the others must not."""
    shape = shape_of(interaction=interaction)
    torch.manual_seed(1)
    ours, our_opt, _ = build_model(shape, "torch", optimizer=optimizer, learning_rate=0.1, world_size=1, device=CPU)
    theirs, their_opt, line = build_model(shape, "torchrec", optimizer=optimizer, learning_rate=0.1, world_size=1,
                                          device=CPU)  # fmt: skip
    assert isinstance(theirs, TorchRecDLRM) and theirs.fused == (optimizer != "adam"), line
    copy_weights(ours, theirs)
    before = {k: t.detach().clone() for k, t in ours.embedding_tables().items()}
    assert two_steps(ours, our_opt) == pytest.approx(two_steps(theirs, their_opt), rel=1e-6, abs=1e-7)
    after_ours, after_theirs = ours.embedding_tables(), theirs.embedding_tables()
    for key, touched in (("a_ids", [5, 99, 42]), ("b_ids", [6, 0, 3])):
        torch.testing.assert_close(after_theirs[key].detach(), after_ours[key].detach(), rtol=1e-5, atol=1e-7)
        moved = (after_ours[key].detach() != before[key]).any(dim=1).nonzero().flatten().tolist()
        assert sorted(moved) == sorted(touched) if optimizer != "adam" else set(touched) <= set(moved)
    if optimizer != "adam":  # the fused tables get no gradient: nothing dense is made for them
        assert all(t.grad is None for t in after_theirs.values())


@pytest.mark.parametrize("interaction", ["dot", "dcn"])
def test_both_implementations_start_from_the_same_weights_for_the_same_seed(interaction):
    shape = shape_of(interaction=interaction)
    args = {"optimizer": "adagrad", "learning_rate": 0.1, "world_size": 1, "device": CPU}
    ours, _, _ = build_model(shape, "torch", seed=7, **args)
    theirs, _, _ = build_model(shape, "torchrec", seed=7, **args)
    other, _, _ = build_model(shape, "torch", seed=8, **args)
    b = batch()
    with torch.no_grad():
        assert torch.equal(ours(b), theirs(b)) and not torch.equal(ours(b), other(b))
    for key, table in ours.embedding_tables().items():
        assert torch.equal(table, theirs.embedding_tables()[key])
        assert table.abs().max() <= (1 / table.shape[0]) ** 0.5


def test_the_start_up_choice_and_its_refusals(monkeypatch):
    shape = shape_of()
    model, _, line = build_model(shape, "torch", optimizer="sgd", learning_rate=0.1, world_size=1, device=CPU)
    assert model.implementation == "torch" and line == "model: pure-torch DLRM (--model torch), sparse gradients"
    _, _, line = build_model(shape, "auto", optimizer="sgd", learning_rate=0.1, world_size=2, device=CPU)
    assert line.endswith("dense gradients")  # DistributedDataParallel all-reduces dense gradients
    monkeypatch.setattr("trainer.models.torchrec_problem", lambda: "OSError: undefined symbol: _ZN3c10")
    assert choose("auto") == ("torch", "pure-torch DLRM (TorchRec does not load here: OSError: undefined symbol: "
                                       "_ZN3c10)")  # fmt: skip
    with pytest.raises(ConfigError, match=r"--model torchrec: TorchRec does not load here \(OSError: undefined"):
        choose("torchrec")


def test_spec_refusals_name_the_field_and_the_fix():
    with pytest.raises(ConfigError, match="dcn_layers apply to interaction: dcn only; add interaction: dcn"):
        shape_of(dcn_layers=2)
    with pytest.raises(ConfigError, match=r"'a_ids', 'b_ids' pool by mean in a job with weighted features \('b_ids'\)"
                                          r"; .*set pooling: sum"):  # fmt: skip
        shape_of(pooling="mean")
    with pytest.raises(ConfigError, match="model.top_mlp: .*at least 1 item"):
        shape_of(top_mlp=[])
    with pytest.raises(ConfigError, match="'d0' is dense; pooling applies to sparse features only"):
        model_shape(spec([{"name": "d0", "pooling": "mean"}, *FEATURES[1:]]), REGISTRY)
    dcn = shape_of(interaction="dcn")
    assert (dcn.dcn_layers, dcn.dcn_low_rank) == (3, 64)
    assert shape_of(interaction="dcn", dcn_layers=1, dcn_low_rank=2).dcn_layers == 1


class _Loader:
    def state_dict(self):
        return {"epoch": 0}

    def load_state_dict(self, state):
        self.state = state


def test_a_checkpoint_resumes_its_own_implementation_and_refuses_others(tmp_path):
    shape = shape_of()
    model, optimizer, _ = build_model(shape, "torchrec", optimizer="adagrad", learning_rate=0.1, world_size=1,
                                      device=CPU)  # fmt: skip
    two_steps(model, optimizer)
    checkpoint = Checkpoint(tmp_path / "c.pt")
    checkpoint.save(model=model, optimizer=optimizer, loader=_Loader(), clock={"steps": 2}, epochs=[])
    again, again_opt, _ = build_model(shape, "torchrec", optimizer="adagrad", learning_rate=0.1, world_size=1,
                                      device=CPU)  # fmt: skip
    assert checkpoint.restore(model=again, optimizer=again_opt, loader=_Loader(), device=CPU).clock == {"steps": 2}
    for key, table in model.embedding_tables().items():
        assert torch.equal(again.embedding_tables()[key], table)
    sums = [s for s in again_opt.fused.state_dict()["state"].values()]
    assert sums and all(v.abs().sum() > 0 for s in sums for v in s.values())  # the tables' Adagrad sums came back
    assert two_steps(again, again_opt) == two_steps(model, optimizer)

    torch_model, torch_opt, _ = build_model(shape, "torch", optimizer="adagrad", learning_rate=0.1, world_size=1,
                                            device=CPU)  # fmt: skip
    with pytest.raises(ConfigError, match=r"written by the torchrec model and this run builds the torch one; .*"
                                          r"run with --model torchrec to resume it, or --restart"):  # fmt: skip
        checkpoint.restore(model=torch_model, optimizer=torch_opt, loader=_Loader(), device=CPU)
    old = tmp_path / "old.pt"  # as the trainer wrote them before the format was recorded
    save_checkpoint(old, {"model": torch_model.state_dict(), "optimizer": torch_opt.state_dict(),
                          "loader": {}, "clock": {}, "epochs": []})  # fmt: skip
    with pytest.raises(ConfigError, match=r"old.pt is of format 1, written before this trainer's format 2 .*--restart"):
        Checkpoint(old).restore(model=torch_model, optimizer=torch_opt, loader=_Loader(), device=CPU)
    assert np.isfinite(two_steps(torch_model, torch_opt)).all()
