"""The metrics against definitions computed the slow, obvious way on fixed predictions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.metrics import auc, evaluate, log_loss


def pairwise_auc(labels, scores) -> float:
    """Every (positive, negative) pair: 1 if the positive scores higher, 1/2 on a tie."""
    pos = [s for y, s in zip(labels, scores, strict=True) if y]
    neg = [s for y, s in zip(labels, scores, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_log_loss_ne_and_calibration_equal_their_definitions(seed):
    rng = np.random.default_rng(seed)
    labels = (rng.random(300) < 0.2).astype(np.float64)
    scores = np.round(np.clip(0.15 + 0.3 * labels * rng.random(300) + 0.2 * rng.random(300), 0, 1), 2)  # ties
    m = evaluate(labels, scores)
    assert m.auc == pytest.approx(pairwise_auc(labels, scores), abs=1e-12)
    expected_loss = -sum(math.log(p) if y else math.log(1 - p) for y, p in zip(labels, scores, strict=True)) / 300
    assert m.log_loss == pytest.approx(expected_loss, rel=1e-12)
    rate = labels.mean()
    assert m.normalized_entropy == pytest.approx(expected_loss / -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)))
    assert m.calibration == pytest.approx(scores.mean() / rate)
    assert (m.rows, m.positives) == (300, int(labels.sum()))


def test_the_docstring_example_and_the_edges():
    m = evaluate(np.array([0, 1, 1, 0]), np.array([0.1, 0.8, 0.6, 0.3]))
    assert (m.auc, round(m.log_loss, 5), round(m.normalized_entropy, 5), round(m.calibration, 5)) == (
        1.0, 0.299, 0.43137, 0.9)
    assert auc(np.array([0, 0]), np.array([0.1, 0.2])) != auc(np.array([0, 0]), np.array([0.1, 0.2]))  # NaN
    assert auc(np.array([1, 0]), np.array([0.5, 0.5])) == 0.5
    assert log_loss(np.array([1.0]), np.array([0.0])) == pytest.approx(-math.log(1e-7))  # clipped, not infinite
    with pytest.raises(ValueError, match="must be 1-D of one length"):
        evaluate(np.zeros(3), np.zeros(4))
