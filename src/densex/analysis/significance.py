"""Paired significance tests between two cells of a sweep on the same questions.

Both tests work on per-question scores `a[i]`, `b[i]` (hit@k as 0/1, EM@l as 0/1, or any
real-valued per-question metric) of the same questions, and on the statistic
`mean(a) - mean(b)` (in percentage points when the inputs are 0/1 and `scale=100`):

- paired bootstrap (Efron & Tibshirani 1993; Koehn 2004): resample questions with
  replacement `n_resamples` times (seeded); the 95% CI is the percentile interval of the
  resampled differences; its p-value is the two-sided "shifted" bootstrap test
  (Berg-Kirkpatrick et al. 2012): the share of resampled differences at least
  |observed| away from the observed one;
- paired randomization (sign-flip permutation) test: each question's pair is swapped with
  probability 1/2; p = (1 + #{|permuted| >= |observed|}) / (1 + n_resamples), or the exact
  p-value over all 2^m flips of the m discordant questions when 2^m <= n_resamples (as
  `scipy.stats.permutation_test(permutation_type="samples")` does).

Everything is vectorised numpy, drawn in chunks so memory stays bounded at any question
count; results are reproducible from `seed`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

N_RESAMPLES = 10_000
_CHUNK_CELLS = 4_000_000  # resample draws held at once (ints): ~32 MB


@dataclass(frozen=True)
class PairedTest:
    """The result of `paired_test`: the difference `mean(a) - mean(b)` (scaled), its
    bootstrap CI, and both p-values."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_bootstrap: float
    p_randomization: float
    n_resamples: int
    exact: bool  # the randomization p-value enumerated every sign flip

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


def _paired(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores must be 1-d and aligned, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError("no paired scores")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired scores must be finite")
    return a - b


def bootstrap_diffs(d: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = 0) -> np.ndarray:
    """`n_resamples` bootstrap means of the per-question differences `d` (resampling
    questions with replacement), drawn in chunks from `np.random.default_rng(seed)`."""
    d = np.asarray(d, dtype=np.float64)
    n = d.size
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples, dtype=np.float64)
    step = max(1, _CHUNK_CELLS // max(n, 1))
    for start in range(0, n_resamples, step):
        m = min(step, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        out[start : start + m] = d[idx].mean(axis=1)
    return out


def randomization_p(
    d: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = 0
) -> tuple[float, bool]:
    """Two-sided sign-flip randomization p-value of mean(d) = 0; `(p, exact)`.

    Only the questions where the two cells differ can change the statistic, so flips are
    drawn for those alone (for 0/1 scores this is the exact sign test on discordant pairs).
    When 2^m <= n_resamples every flip is enumerated and p is exact.
    """
    d = np.asarray(d, dtype=np.float64)
    nz = d[d != 0]
    m = nz.size
    observed = abs(nz.sum())
    if m == 0:
        return 1.0, True
    tol = 1e-9 * max(1.0, observed)
    if m <= 30 and 2**m <= n_resamples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        stats = np.abs(signs @ nz)
        return float(np.mean(stats >= observed - tol)), True
    rng = np.random.default_rng(seed)
    count = 0
    step = max(1, _CHUNK_CELLS // m)
    for start in range(0, n_resamples, step):
        k = min(step, n_resamples - start)
        signs = rng.integers(0, 2, size=(k, m), dtype=np.int8) * 2 - 1
        stats = np.abs(signs @ nz)
        count += int(np.count_nonzero(stats >= observed - tol))
    return (count + 1) / (n_resamples + 1), False


def paired_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    scale: float = 100.0,
) -> PairedTest:
    """Paired bootstrap CI + p-value and randomization p-value for mean(a) - mean(b).

    `a`, `b`: per-question scores of two cells on the same questions, aligned. Means, the
    difference and the CI are multiplied by `scale` (100: percentage points for 0/1 scores).
    """
    d = _paired(a, b)
    obs = float(d.mean())
    boot = bootstrap_diffs(d, n_resamples, seed)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    tol = 1e-12 * max(1.0, abs(obs))
    p_boot = float(np.mean(np.abs(boot - obs) >= abs(obs) - tol)) if obs != 0 else 1.0
    p_rand, exact = randomization_p(d, n_resamples, seed)
    return PairedTest(
        n=int(d.size),
        mean_a=scale * float(np.mean(np.asarray(a, dtype=np.float64))),
        mean_b=scale * float(np.mean(np.asarray(b, dtype=np.float64))),
        diff=scale * obs,
        ci_low=scale * float(lo),
        ci_high=scale * float(hi),
        p_bootstrap=p_boot,
        p_randomization=float(p_rand),
        n_resamples=int(n_resamples),
        exact=exact,
    )


def significance_mark(p: float, alpha: float = 0.05) -> str:
    """`*` for p < alpha, `**` for p < alpha / 5 (0.01 at the default), else ``."""
    if p < alpha / 5:
        return "**"
    return "*" if p < alpha else ""
