"""Balanced mode's two extra factors of the composite score (balanced weighs
reliability, latency, tail latency, throughput, price and token fit).

Tail latency: ``ArmState.ewma_p95_ms`` tracks the 95th percentile of a deployment's
latency with an exceedance-weighted EWMA (an asymmetric EWMA, i.e. an expectile
tracker): a sample above the estimate pulls it up by ``alpha x 0.95`` of the gap, a
sample below pulls it down by ``alpha x 0.05`` of the gap (``alpha``: EWMA_ALPHA,
0.3 by default). Its fixed point is the latency the samples exceed about as much,
weighted, as they fall short 19 to 1: the 0.95-expectile, for latency distributions
between the 90th and the 97th percentile. The first sample is taken as is (also
on a state saved before the tracker existed, whose estimate is 0). Plain
float arithmetic on the outcome's ``latency_ms``: deterministic, no wall clock, and
a replay of the same outcomes reproduces it bit for bit.

Its factor ``tail_latency_penalty = max(1, ewma_p95 / p95_latency_baseline_ms)``:
1 while the observed tail stays within the deployment's declared p95 baseline, the
ratio above it (the mean latency already rewards speed; this punishes a tail that
breaks the baseline). 1 before any sample.

Token fit: how much of the deployment's declared window the request uses,
``fill = max((prompt + max_tokens) / context_window, max_tokens / max_output_tokens)``
(prompt at four characters a token, as the capability filter counts it);
``token_fit_penalty = 1 + 2 x max(0, fill - 0.5)``: 1 up to half the window, 2 at a
full one. A model declaring neither limit, or a request of unknown size, is
neutral (1).
"""

from __future__ import annotations

from app.config.providers import ModelSpec
from app.routing.capabilities import Needs

#: The quantile the tail tracker follows.
TAIL_QUANTILE = 0.95
#: Fill of the window below which a request fits perfectly, and the penalty's slope.
FIT_FREE_FILL = 0.5
FIT_SLOPE = 2.0


def track_p95(previous: float, latency_ms: float, observations: int, alpha: float) -> float:
    """The tail estimate after one more latency sample. The first is taken as is, and so
    is the first one after none was kept (a row written before the tracker existed)."""
    if observations == 0 or previous == 0.0:
        return latency_ms
    gap = latency_ms - previous
    weight = TAIL_QUANTILE if gap > 0 else 1.0 - TAIL_QUANTILE
    return previous + alpha * weight * gap


def tail_penalty(ewma_p95_ms: float, baseline_ms: float) -> float:
    if ewma_p95_ms <= baseline_ms:
        return 1.0
    return ewma_p95_ms / baseline_ms


def fill(spec: ModelSpec | None, needs: Needs | None) -> float:
    """Share of the model's declared window the request needs (0: none declared)."""
    if spec is None or needs is None:
        return 0.0
    used = 0.0
    if spec.context_window is not None:
        used = needs.tokens / spec.context_window
    if spec.max_output_tokens is not None and needs.max_tokens:
        used = max(used, needs.max_tokens / spec.max_output_tokens)
    return used


def fit_penalty(used: float) -> float:
    if used <= FIT_FREE_FILL:
        return 1.0
    return 1.0 + FIT_SLOPE * (used - FIT_FREE_FILL)
