"""UCB1 and Thompson scores, cost and latency bonuses, the latency EMA.

The rules: docs/design.md#ucb1-and-thompson-sampling.

Every function is pure. Thompson's randomness comes from a generator seeded by
the caller (from the request id and attempt), so a replay draws the same samples.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

#: Weight of the newest latency sample in the EMA.
EMA_NEW_WEIGHT = 0.2
#: The cost at which the cost bonus reaches zero ($ per 1M tokens).
COST_SCALE_PER_1M = 10.0
#: The latency at which the latency bonus reaches zero (seconds).
LATENCY_SCALE_S = 30.0
#: A reward at or above this counts as a Thompson success.
THOMPSON_SUCCESS_THRESHOLD = 0.5


def cost_bonus(cost_per_1m: float, weight: float) -> float:
    return max(0.0, 1.0 - cost_per_1m / COST_SCALE_PER_1M) * weight


def latency_bonus(avg_latency_s: float, weight: float) -> float:
    return max(0.0, 1.0 - avg_latency_s / LATENCY_SCALE_S) * weight


def ema_latency(previous_s: float, sample_s: float, samples_before: int) -> float:
    """The first sample is taken as is; later ones weigh 20 %."""
    if samples_before == 0:
        return sample_s
    return previous_s * (1.0 - EMA_NEW_WEIGHT) + sample_s * EMA_NEW_WEIGHT


def exploration_term(c: float, total_pulls: int, pulls: int) -> float:
    """``C * sqrt(ln N / n_i)``; infinite for an arm never pulled."""
    if pulls <= 0:
        return math.inf
    if total_pulls <= 1:
        return 0.0
    return c * math.sqrt(math.log(total_pulls) / pulls)


def thompson_update(alpha: float, beta: float, reward: float) -> tuple[float, float]:
    if reward >= THOMPSON_SUCCESS_THRESHOLD:
        return alpha + 1.0, beta
    return alpha, beta + 1.0


def thompson_draws(params: Sequence[tuple[float, float]], rng: random.Random) -> list[float]:
    return [rng.betavariate(a, b) for a, b in params]


def argmax_first(scores: Sequence[float]) -> int:
    """Index of the largest score; ties go to the earliest (config order)."""
    best = 0
    for i in range(1, len(scores)):
        if scores[i] > scores[best]:
            best = i
    return best


def seeded_rng(*parts: object) -> random.Random:
    """A generator seeded from stable text (never from ``hash()``, which is salted)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))
