"""`pipi.stats.PairedAUCBootstrap` and the figure statistics, against independent computations:
brute-force weighted AUCs (scikit-learn with sample weights), a replayed rng, scipy's
bootstrap, scikit-learn's average precision and confusion matrix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from brute import replay_delta_bootstrap
from scipy import stats
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.metrics import confusion_matrix as sk_confusion

from pipi.errors import ConfigError
from pipi.stats import (
    PairedAUCBootstrap,
    bootstrap_ci,
    confusion_matrix,
    per_class_auc,
    pooled_pr,
    row_normalise,
)


def problem(*, seed=0, n_videos=8, per_video=50, k=4, s=2, rare_videos=(0, 1)):
    """Frames of n_videos videos; class k-1 ("rare") only in ``rare_videos``; S seeds, 2 arms."""
    rng = np.random.default_rng(seed)
    videos = np.repeat(np.arange(n_videos), per_video)
    y = rng.integers(0, k - 1, videos.size)
    rare = np.isin(videos, rare_videos) & (rng.random(videos.size) < 0.3)
    y[rare] = k - 1
    onehot = np.eye(k)[y]
    ref = rng.normal(size=(s, y.size, k)) + onehot
    new = ref + 0.4 * onehot + 0.3 * rng.normal(size=(s, y.size, k))
    columns = {("ref", i): ref[i] for i in range(s)} | {("new", i): new[i] for i in range(s)}
    return y, videos, ref, new, columns


def keys(s):
    return [("ref", i) for i in range(s)], [("new", i) for i in range(s)]


def test_macro_class_set_is_fixed_lost_resamples_are_redrawn_and_counted():
    """A class in 2 of 8 videos: resamples without both videos are drawn again; the kept
    resamples and their number are replayed with the rng, each statistic recomputed with
    scikit-learn sample weights."""
    y, videos, ref, new, columns = problem()
    boot = PairedAUCBootstrap(y, videos, columns, range(4), n_resamples=25, rng=3)
    got = boot.delta(*keys(2))
    assert got.unit == "videos" and got.n_resamples == 25
    gen, kept, lost = np.random.default_rng(3), [], 0
    while len(kept) < 25:
        c = np.bincount(gen.integers(0, 8, 8), minlength=8)
        if c[0] + c[1] == 0:  # the rare class (videos 0, 1) is lost: drawn again
            lost += 1
        else:
            kept.append(c)
    assert lost > 0 and got.n_redrawn == lost

    def macro_delta(w):
        return np.mean([roc_auc_score(y == j, new[i][:, j], sample_weight=w)
                        - roc_auc_score(y == j, ref[i][:, j], sample_weight=w)
                        for i in range(2) for j in range(4)])

    star = np.array([macro_delta(c[videos]) for c in kept])
    pct = np.percentile(star, [2.5, 97.5])
    np.testing.assert_allclose(got.percentile_interval, pct, atol=1e-12)
    assert got.statistic == pytest.approx(macro_delta(np.ones(y.size)), abs=1e-12)


def test_one_class_in_two_videos_gets_a_class_stratified_frame_interval():
    y, videos, ref, new, columns = problem()
    boot = PairedAUCBootstrap(y, videos, columns, range(4), n_resamples=60, rng=1)
    rare = boot.delta(*keys(2), classes=[3])
    common = boot.delta(*keys(2), classes=[0])
    assert boot.videos_with(3) == 2 and boot.videos_with(0) == 8
    assert rare.unit == "frames (stratified by class)" and common.unit == "videos"
    assert np.isfinite([*rare.bca_interval, *rare.percentile_interval]).all()
    ref_ = replay_delta_bootstrap(y, ref, new, [3], strata=y, n_resamples=60, rng=1)
    np.testing.assert_allclose(rare.percentile_interval, ref_["percentile"], atol=1e-12)
    np.testing.assert_allclose(rare.bca_interval, ref_["bca"], atol=1e-12)


def test_a_class_in_one_video_sends_the_macro_to_the_stratified_frames():
    y, videos, _, _, columns = problem(rare_videos=(0,))
    boot = PairedAUCBootstrap(y, videos, columns, range(4), n_resamples=30, rng=0)
    got = boot.delta(*keys(2))
    assert got.unit == "frames (stratified by class)" and np.isfinite(got.bca_interval).all()


def test_frame_resampling_equals_the_generic_bootstrap_and_agrees_with_scipy():
    y, videos, ref, new, columns = problem(seed=2, n_videos=4, per_video=60, s=1)
    boot = PairedAUCBootstrap(y, videos, columns, range(4), resample="frame", n_resamples=400,
                              rng=5)
    got = boot.delta(*keys(1))
    assert got.unit == "frames" and got.n_units == y.size
    same = bootstrap_ci((y, ref[0], new[0]), lambda yy, r, n: float(np.mean(
        per_class_auc(yy, n) - per_class_auc(yy, r))), n_resamples=400, rng=5)
    np.testing.assert_allclose(got.bca_interval, same.bca_interval, atol=1e-12)
    assert got.n_redrawn == 0

    def auc(pos, score):  # Mann-Whitney U / (m n), midranks for ties
        r = stats.rankdata(score)
        m = pos.sum()
        return (r[pos].sum() - m * (m + 1) / 2) / (m * (pos.size - m))

    def statistic(i):  # rows i of the paired data (scipy's `paired` resamples indices)
        return np.mean([auc(y[i] == j, new[0][i, j]) - auc(y[i] == j, ref[0][i, j])
                        for j in range(4)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sp = stats.bootstrap((np.arange(y.size),), statistic, vectorized=False,
                             n_resamples=400, method="BCa", random_state=0)
    low, high = sp.confidence_interval
    width = high - low
    assert abs(got.bca_interval.low - low) < 0.25 * width
    assert abs(got.bca_interval.high - high) < 0.25 * width


def test_bad_resample_is_refused():
    y, videos, _, _, columns = problem()
    with pytest.raises(ConfigError, match="resample must be one of"):
        PairedAUCBootstrap(y, videos, columns, range(4), resample="patients")


def test_pooled_pr_and_confusion_match_scikit_learn():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 5, 300)
    probs = rng.random((3, 300, 6))
    prec, ap = pooled_pr(y, probs, 2)
    yy = np.tile(y == 2, 3)
    ss = probs[:, :, 2].ravel()
    assert ap == pytest.approx(average_precision_score(yy, ss), abs=1e-12)
    thr = np.unique(ss)
    tp = np.array([(yy & (ss >= t)).sum() for t in thr])
    fp = np.array([(~yy & (ss >= t)).sum() for t in thr])
    recall, precision = tp / yy.sum(), tp / (tp + fp)
    grid = np.linspace(0, 1, 201)
    for r in (0.1, 0.25, 0.5, 0.9, 1.0):   # interpolated: best precision at recall >= r
        i = int(np.argmin(np.abs(grid - r)))
        assert prec[i] == pytest.approx(precision[recall >= grid[i]].max(), abs=1e-12)
    pred = probs[0].argmax(1)
    got = confusion_matrix(y, pred, range(5))
    want = sk_confusion(y, pred, labels=range(6))[:5]
    np.testing.assert_array_equal(got[:, :5], want[:, :5])
    np.testing.assert_array_equal(got[:, 5], want[:, 5])     # predicted class 5: "other"
    np.testing.assert_allclose(row_normalise(got).sum(1), 1.0)
