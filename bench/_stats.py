"""Summaries the benchmarks print: percentiles, and how far a median of noisy runs can
be trusted.

On a small shared machine the same comparison moves by +-5-20% from one run to the
next, so a benchmark prints the median of its per-pair ratios and, with it, a
distribution-free confidence interval for that median (from the order statistics: it
assumes only that the pairs are independent and alike).
"""

from __future__ import annotations

import math
import statistics


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The narrowest pair of order statistics (x_(k), x_(n+1-k)) that holds the true
    median with at least ``confidence``; None when there are too few values for that
    confidence (fewer than 6 for 95%)."""
    n = len(values)
    ordered = sorted(values)
    # P(x_(k) <= median <= x_(n+1-k)) = 1 - 2 * P(Binomial(n, 1/2) < k)
    below = 0.0  # P(Binomial(n, 1/2) < k), for k = 1, 2, ...
    best: int | None = None
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) / 2**n
        if 1 - 2 * below < confidence:
            break
        best = k
    if best is None:
        return None
    return ordered[best - 1], ordered[n - best]


def describe_ratios(ratios: list[float]) -> str:
    """``median 0.93 (95% CI 0.90-0.95, 11 pairs: 0.85 ... 1.02)``."""
    interval = median_interval(ratios)
    ci = f"95% CI {interval[0]:.2f}-{interval[1]:.2f}, " if interval else "too few for a 95% CI, "
    listed = " ".join(f"{r:.2f}" for r in sorted(ratios))
    return f"median {statistics.median(ratios):.2f} ({ci}{len(ratios)} pairs: {listed})"
