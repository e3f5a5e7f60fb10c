"""An arm's output throughput (tokens per second): its samples and their EMA, which
the throughput mode's bonus reads (:func:`app.understanding.modes.throughput_bonus`)."""

from __future__ import annotations

#: Weight of the newest sample in the throughput EMA (as the latency EMA's).
THROUGHPUT_EMA_NEW_WEIGHT = 0.2


def throughput_sample(tokens_out: int, latency_ms: float) -> float | None:
    """Output tokens per second of one successful attempt; None when it says nothing."""
    if tokens_out <= 0 or latency_ms <= 0.0:
        return None
    return tokens_out / (latency_ms / 1000.0)


def ema_throughput(previous: float, sample: float, samples_before: int) -> float:
    """The first sample is taken as is; later ones weigh 20 % (as the latency EMA)."""
    if samples_before == 0:
        return sample
    return previous * (1.0 - THROUGHPUT_EMA_NEW_WEIGHT) + sample * THROUGHPUT_EMA_NEW_WEIGHT
