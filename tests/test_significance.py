"""Paired bootstrap and randomization tests: hand-computed cases and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from densex.analysis.significance import (
    bootstrap_diffs,
    paired_test,
    randomization_p,
    significance_mark,
)


def test_randomization_exact_hand_computed():
    # 4 discordant questions all favour a: of the 2^4 sign flips only all-+ and all-- reach
    # |sum| = 4, so p = 2/16; the tied fifth question cannot change the statistic
    a = [1, 1, 1, 1, 0]
    b = [0, 0, 0, 0, 0]
    p, exact = randomization_p(np.subtract(a, b, dtype=float), n_resamples=10_000)
    assert exact and p == pytest.approx(0.125)
    # scipy's exact paired permutation test agrees
    res = stats.permutation_test(
        (np.array(a, float), np.array(b, float)),
        lambda x, y: np.mean(x - y),
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=10_000,
    )
    assert res.pvalue == pytest.approx(0.125)


def test_randomization_no_difference_is_p_one():
    assert randomization_p(np.zeros(10)) == (1.0, True)


def test_bootstrap_hand_computed():
    # d = [1, 0]: resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    boot = bootstrap_diffs(np.array([1.0, 0.0]), n_resamples=20_000, seed=1)
    values, counts = np.unique(boot, return_counts=True)
    assert values.tolist() == [0.0, 0.5, 1.0]
    assert counts / counts.sum() == pytest.approx([0.25, 0.5, 0.25], abs=0.01)
    t = paired_test([1, 0], [0, 0], n_resamples=20_000, seed=1)
    assert t.diff == 50.0 and (t.ci_low, t.ci_high) == (0.0, 100.0)
    # |mean* - 0.5| >= 0.5 exactly when mean* is 0 or 1
    assert t.p_bootstrap == pytest.approx(0.5, abs=0.02)


def test_seeded_and_reproducible():
    rng = np.random.default_rng(3)
    a, b = rng.random(200) < 0.6, rng.random(200) < 0.5
    assert paired_test(a, b, seed=7) == paired_test(a, b, seed=7)


def test_against_scipy_on_random_hits():
    rng = np.random.default_rng(0)
    n = 400
    b = (rng.random(n) < 0.55).astype(float)
    a = np.where(rng.random(n) < 0.15, 1.0, b)  # a = b plus some extra hits
    t = paired_test(a, b, n_resamples=10_000, seed=0)
    assert t.diff == pytest.approx(100 * (a.mean() - b.mean()))
    boot = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: np.mean(x - y, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=10_000,
        random_state=np.random.default_rng(1),
    )
    lo, hi = boot.confidence_interval
    assert t.ci_low == pytest.approx(100 * lo, abs=0.6)
    assert t.ci_high == pytest.approx(100 * hi, abs=0.6)
    d = a - b
    assert np.count_nonzero(d) > 14  # sampled, not exact
    perm = stats.permutation_test(
        (a, b),
        lambda x, y, axis=-1: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=10_000,
        random_state=np.random.default_rng(2),
    )
    assert not t.exact
    assert t.p_randomization == pytest.approx(perm.pvalue, abs=0.01)
    # a small, noisy difference is not significant
    c = np.where(rng.random(n) < 0.03, 1 - b, b)
    near = paired_test(c, b, n_resamples=10_000, seed=0)
    perm2 = stats.permutation_test(
        (c, b),
        lambda x, y, axis=-1: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=10_000,
        random_state=np.random.default_rng(2),
    )
    assert near.p_randomization == pytest.approx(perm2.pvalue, abs=0.03)


def test_rejects_unaligned_or_empty():
    with pytest.raises(ValueError, match="aligned"):
        paired_test([1, 0], [1])
    with pytest.raises(ValueError, match="no paired"):
        paired_test([], [])


def test_marks():
    assert [significance_mark(p) for p in (0.001, 0.03, 0.2)] == ["**", "*", ""]
