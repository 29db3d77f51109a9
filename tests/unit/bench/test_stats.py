"""The benchmarks' summaries (bench/_stats.py): the confidence interval they print
for a median must hold the median as often as it claims."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _load_stats() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_stats", BENCH / "_stats.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats = _load_stats()


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n+1-k)) for n values of a continuous distribution."""
    outcomes: int = 2**n
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / outcomes


def test_interval_is_the_narrowest_with_the_confidence() -> None:
    for n in range(6, 40):
        values = [float(v) for v in range(1, n + 1)]
        interval = stats.median_interval(values)
        assert interval is not None
        k = int(interval[0])  # values are their own ranks
        assert interval == (k, n + 1 - k)
        assert _coverage(n, k) >= 0.95
        assert k == n // 2 or _coverage(n, k + 1) < 0.95  # one rank further in would not do


def test_known_intervals() -> None:
    ranks = {9: (2, 8), 11: (2, 10), 15: (4, 12), 20: (6, 15)}
    for n, expected in ranks.items():
        shuffled = [float(v) for v in range(1, n + 1)]
        random.Random(n).shuffle(shuffled)
        assert stats.median_interval(shuffled) == expected


def test_too_few_values_have_no_interval() -> None:
    assert stats.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert stats.median_interval([]) is None
    assert stats.median_interval([1.0, 2.0], confidence=0.5) == (1.0, 2.0)


def test_interval_holds_the_median_as_often_as_claimed() -> None:
    rng = random.Random(7)
    trials, held = 4000, 0
    for _ in range(trials):
        values = [rng.expovariate(1.0) for _ in range(11)]  # skewed; true median ln 2
        low, high = stats.median_interval(values)
        held += low <= math.log(2) <= high
    assert held / trials >= 0.97  # 11 values: the interval's coverage is 0.988


def test_describe_ratios_prints_median_and_interval() -> None:
    text = stats.describe_ratios([0.9, 0.95, 0.91, 0.93, 0.97, 0.92, 0.94])
    assert text.startswith("median 0.93 (95% CI 0.90-0.97, 7 pairs: 0.90 0.91")
    assert "too few" in stats.describe_ratios([0.9, 0.95])


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(101)]
    assert stats.percentile(values, 0.5) == 50.0
    assert stats.percentile(values, 0.99) == 99.0
    assert stats.percentile([3.0], 0.99) == 3.0
