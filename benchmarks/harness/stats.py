"""Percentiles and medians as the benchmarks report them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def median_item(items: Sequence[T], key: Callable[[T], float]) -> T:
    """The item at the middle rank by ``key`` (the upper one of an even count): the median
    round of a repeated measurement, with all its figures."""
    return sorted(items, key=key)[len(items) // 2]
