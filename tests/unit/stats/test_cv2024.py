"""pipi.stats.cv2024 against the Capsule Vision 2024 challenge's definitions, re-implemented
in tests/capsule_vision.py from its ``generate_metrics_report`` (scikit-learn on one-hot
labels), on random sheets and on the cases the script treats specially."""

from __future__ import annotations

import numpy as np
import pytest
from capsule_vision import CLASSES, challenge_report

from pipi.stats.cv2024 import CV2024_CLASSES, cv2024_metrics

TOL = 1e-12


def _check(labels, probs):
    got = cv2024_metrics(labels, probs, CLASSES)
    onehot = np.eye(10, dtype=int)[labels]
    want = challenge_report(onehot, probs, CLASSES)
    assert got.mean_auc == pytest.approx(want["mean_auc"], abs=TOL)
    assert got.balanced_accuracy == pytest.approx(want["balanced_accuracy"], abs=TOL)
    assert got.combined == pytest.approx(want["combined"], abs=TOL)
    for name in ("auc", "specificity", "sensitivity", "f1", "pr_auc"):
        assert list(getattr(got, name)) == pytest.approx(
            [want[name][c] for c in CLASSES], abs=TOL), name
    m = got.metrics("test")
    assert m["test/cv2024_combined"] == got.combined
    assert m["test/cv2024/pr_auc/Foreign Body"] == got.pr_auc[4]
    return got


@pytest.mark.parametrize("seed", range(4))
def test_random_sheets_match_the_challenge_definitions(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, 200)
    labels[:10] = np.arange(10)  # every class true at least once
    logits = rng.normal(size=(200, 10)) + 1.5 * np.eye(10)[labels]
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    _check(labels, probs)


def test_a_class_without_positives_scores_auc_zero_and_counts_in_the_plain_mean():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 9, 120)            # no Worms frame
    labels[:9] = np.arange(9)
    probs = rng.dirichlet(np.ones(10), 120)
    probs[:3] = np.eye(10)[[9, 9, 9]] * 0.9 + 0.01  # Worms predicted (every class predicted)
    probs[3:12] = np.eye(10)[np.arange(9)] * 0.9 + 0.01
    got = _check(labels, probs)
    assert got.auc[9] == 0.0
    assert got.mean_auc == pytest.approx(np.mean(got.auc[:9]) * 9 / 10)
    assert got.sensitivity[9] == 0.0 and got.f1[9] == 0.0


def test_the_class_order_is_the_challenges():
    assert CV2024_CLASSES == CLASSES
