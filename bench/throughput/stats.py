"""Percentiles and latency summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Latency:
    n: int
    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency | None:
        """The summary of ``values``, or None when there are none."""
        if not values:
            return None
        return cls(
            n=len(values),
            p50=percentile(values, 0.50),
            p95=percentile(values, 0.95),
            p99=percentile(values, 0.99),
            mean=sum(values) / len(values),
            max=max(values),
        )


def latency_dict(values: Sequence[float]) -> dict[str, float] | None:
    """``Latency.of(values)`` as a JSON-ready dict (None for no values)."""
    summary = Latency.of(values)
    return None if summary is None else asdict(summary)
