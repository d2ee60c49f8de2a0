"""Figures over repeated measurements, and how a ratio prints.

Medians, not means: on a shared 2-core machine a batch now and then waits for something else,
and one such batch moves a mean but not a median. Ratios are of two contenders *in the same run*
(the machine's mood cancels out); a ratio whose either side is missing is None and prints as
``-``, so a table with a failed contender still prints.
"""

from __future__ import annotations

import argparse
import math
import statistics
from typing import Callable, Iterable, Optional


def rounds(text: str) -> int:
    """The argparse type of a benchmark's ``--rounds``: a whole number, at least 1 (no rounds would
    leave every figure empty)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"rounds must be a whole number, not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"rounds must be at least 1, not {n}")
    return n


def median(values: Iterable[Optional[float]]) -> float:
    """The median of the values that are there (None skipped); NaN if none are."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else float("nan")


def median_of(runs: int, measure: Callable[[], float]) -> float:
    """The median of ``runs`` calls of ``measure`` (each returns its own measured figure)."""
    return statistics.median(measure() for _ in range(runs))


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1): the smallest value with at least a ``q``
    share of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def latency_ms(ms: list[float]) -> dict[str, float]:
    """Count, p50, p99 and max of latencies in milliseconds, rounded to microseconds."""
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(percentile(ms, 0.99), 3),
            "max_ms": round(max(ms), 3)}


def spread(times: list[float]) -> dict:
    """Median, slowest, and the slowest over the median, with and without the first (which in a cold
    JVM also pays for class loading, the JIT and Spark's code generation)."""
    med = statistics.median(times)
    return {"median": med, "max": max(times), "max_over_median": max(times) / med,
            "max_over_median_after_first": max(times[1:]) / med if len(times) > 1 else None}


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    if a is None or b is None or b == 0 or a != a or b != b:
        return None
    return a / b


def fmt_ratio(x: Optional[float], digits: int = 2, suffix: str = "") -> str:
    """A ratio as printed in the tables (``1.56``, ``1.56x`` with ``suffix="x"``), ``-`` if missing."""
    return "-" if x is None else f"{x:.{digits}f}{suffix}"
