"""Evaluation metrics of a binary label: AUC, log loss, normalized entropy and calibration (numpy only).

Normalized entropy (NE) is the metric of Meta's recommendation papers: the log loss divided by the
entropy of the base rate, i.e. by the log loss of always predicting the observed rate. NE < 1
means the model knows more than the base rate; lower is better.

    >>> evaluate(np.array([0, 1, 1, 0]), np.array([0.1, 0.8, 0.6, 0.3]))
    Metrics(rows=4, positives=2, auc=1.0, log_loss=0.299..., normalized_entropy=0.432..., calibration=0.9)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

EPSILON = 1e-7  # predictions are clipped to [EPSILON, 1 - EPSILON] before taking logs


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve: the chance that a random positive scores above a random negative (ties count
    half). NaN when one class is absent."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # tied scores share the mean of their ranks (1-based)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean binary cross-entropy, natural log."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), EPSILON, 1 - EPSILON)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def entropy(rate: float) -> float:
    """The log loss of always predicting ``rate`` on data whose positive rate is ``rate``."""
    p = min(max(rate, EPSILON), 1 - EPSILON)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


@dataclass(frozen=True)
class Metrics:
    rows: int
    positives: int
    auc: float
    log_loss: float
    normalized_entropy: float
    calibration: float  # mean prediction / observed rate; 1 is calibrated

    def as_dict(self) -> dict:
        return asdict(self)


def evaluate(labels: np.ndarray, probabilities: np.ndarray) -> Metrics:
    """All metrics of one label type over the same rows."""
    labels = np.asarray(labels, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if labels.shape != probabilities.shape or labels.ndim != 1:
        raise ValueError(f"labels {labels.shape} and predictions {probabilities.shape} must be 1-D of one length")
    rate = float(labels.mean()) if len(labels) else math.nan
    loss = log_loss(labels, probabilities) if len(labels) else math.nan
    return Metrics(
        rows=len(labels),
        positives=int(labels.sum()),
        auc=auc(labels, probabilities),
        log_loss=loss,
        normalized_entropy=loss / entropy(rate) if len(labels) and 0 < rate < 1 else math.nan,
        calibration=float(probabilities.mean()) / rate if rate > 0 else math.nan,
    )
