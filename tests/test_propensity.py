"""Thompson's integrated propensity (app/routing/propensity.py) against exact values,
an exact integral and 100,000-draw Monte Carlo."""

from __future__ import annotations

import math
import random

import pytest

from app.routing.propensity import (
    MAX_ERROR,
    _continued_fraction,
    forget_propensities,
    thompson_propensity,
)


def _bench_arms() -> list[tuple[float, float]]:
    """The 16 arms of bench/throughput/decisions.py's state."""
    arms = []
    for i in range(16):
        pulls = 150 + 37 * i
        wins = round(pulls * (0.80 + 0.012 * i))
        arms.append((1.0 + wins, 1.0 + pulls - wins))
    return arms


def test_closed_forms() -> None:
    for n in (2, 3, 16):
        assert thompson_propensity([(1.0, 1.0)] * n, n - 1) == pytest.approx(1 / n, abs=1e-5)
    # P(Beta(a, 1) > U) = E[Beta(a, 1)] = a / (a + 1).
    for a in (2.0, 3.0, 7.5):
        assert thompson_propensity([(a, 1.0), (1.0, 1.0)], 0) == pytest.approx(
            a / (a + 1), abs=1e-5
        )
    # Equal arms, whatever their shape and regime: 1/n.
    for shape in ((2.5, 1.5), (12.0, 3.0), (700.0, 15.0), (40_000.0, 90.0)):
        assert thompson_propensity([shape] * 5, 2) == pytest.approx(0.2, abs=MAX_ERROR)
    assert thompson_propensity([(5.0, 5.0)], 0) == 1.0


def test_probabilities_sum_to_one() -> None:
    rng = random.Random(3)
    sets = [_bench_arms()]
    for _ in range(6):
        sets.append(
            [(1.0 + rng.randint(0, 60), 1.0 + rng.random() * 30) for _ in range(rng.randint(2, 9))]
        )
    for arms in sets:
        total = sum(thompson_propensity(arms, k) for k in range(len(arms)))
        assert total == pytest.approx(1.0, abs=len(arms) * MAX_ERROR)


def _cdf(a: float, b: float, x: float) -> float:
    """I_x(a, b), exact: the continued fraction."""
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


def test_continued_fraction_against_closed_forms() -> None:
    for x in (0.02, 0.3, 0.5, 0.7, 0.98):
        for c in (1.0, 2.5, 40.0):
            assert _cdf(1.0, c, x) == pytest.approx(1.0 - (1.0 - x) ** c, rel=1e-10, abs=1e-14)
            assert _cdf(c, 1.0, x) == pytest.approx(x**c, rel=1e-10, abs=1e-14)
        assert _cdf(2.0, 2.0, x) == pytest.approx(3 * x**2 - 2 * x**3, rel=1e-10)


def _exact(arms: list[tuple[float, float]], chosen: int) -> float:
    """Reference: the integral in logit space on a fine uniform grid (Simpson), exact CDFs."""
    a, b = arms[chosen]
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    mean = math.log(a / b)
    spread = math.sqrt(1 / a + 1 / b)
    low, high, steps = mean - 14 * spread, mean + 14 * spread, 1200
    h = (high - low) / steps
    total = 0.0
    for i in range(steps + 1):
        y = low + i * h
        x = 1.0 / (1.0 + math.exp(-y))
        value = math.exp(log_norm + a * math.log(x) + b * math.log1p(-x))
        for j, (aj, bj) in enumerate(arms):
            if j != chosen and value > 1e-300:
                value *= _cdf(aj, bj, x)
        total += value * (1 if i in (0, steps) else 4 if i % 2 else 2)
    return total * h / 3


@pytest.mark.parametrize(
    "arms",
    [
        _bench_arms(),
        [(1.0, 1.0), (2.0, 1.0), (1.0, 3.0), (4.0, 4.0)],
        [(1.5, 2.25), (3.7, 1.2), (2.2, 4.9)],
        [(950.0, 51.0), (93.0, 8.0), (2.0, 1.0), (9_801.0, 501.0)],
        [(12.0, 30.0), (300.0, 700.0), (6.5, 14.5)],
    ],
    ids=["bench16", "fresh", "fractional", "mixed", "peizer-pratt"],
)
def test_against_an_exact_integral(arms: list[tuple[float, float]]) -> None:
    chosen = [0, len(arms) // 2, len(arms) - 1]
    for k in chosen:
        assert thompson_propensity(arms, k) == pytest.approx(_exact(arms, k), abs=MAX_ERROR)


@pytest.mark.parametrize(
    "arms",
    [
        [(1.0, 1.0), (1.0, 2.0), (2.0, 1.0)],
        [(1.3, 1.0), (1.0, 1.7), (3.0, 2.0), (2.5, 2.5)],
        [(30.0, 4.0), (90.0, 12.0), (7.0, 1.0)],
        [(692.0, 15.0), (648.0, 22.0), (604.0, 29.0), (562.0, 34.0)],
    ],
    ids=["small", "fractional", "mixed", "bench-top4"],
)
def test_against_monte_carlo(arms: list[tuple[float, float]]) -> None:
    """100,000 draws: each arm's win frequency within MAX_ERROR + 4.5 standard errors."""
    draws = 100_000
    rng = random.Random(11)
    samples = [[rng.betavariate(a, b) for _ in range(draws)] for a, b in arms]
    wins = [0] * len(arms)
    for row in zip(*samples, strict=True):
        wins[row.index(max(row))] += 1
    for k in range(len(arms)):
        frequency = wins[k] / draws
        noise = math.sqrt(max(frequency * (1 - frequency), 1e-4) / draws)
        assert abs(thompson_propensity(arms, k) - frequency) <= MAX_ERROR + 4.5 * noise


def test_deterministic_to_the_bit() -> None:
    """Recorded decisions carry this number: a replay must recompute it exactly. A change
    of arithmetic that alters it must bump the Thompson ALGORITHM_VERSION."""
    arms = _bench_arms()
    first = [thompson_propensity(arms, k) for k in range(16)]
    thompson_propensity.__globals__["_shape"].cache_clear()
    forget_propensities()
    assert [thompson_propensity(list(arms), k) for k in range(16)] == first
    assert first[15].hex() == PINNED_BENCH_TOP


def test_a_posterior_set_asked_again_is_read_from_the_cache() -> None:
    """Equal posteriors, however given, share one entry; an entry holds what integrating
    gives afresh, to the bit; another chosen arm is another entry."""
    forget_propensities()
    arms = _bench_arms()
    integrated = thompson_propensity(arms, 14)
    cache = thompson_propensity.__globals__["_propensity"]
    as_ints = [(int(a), int(b)) for a, b in arms]
    assert as_ints == arms  # whole numbers: the same posteriors
    hits, misses = cache.cache_info().hits, cache.cache_info().misses
    assert thompson_propensity(as_ints, 14) == integrated
    assert thompson_propensity(tuple(arms), 14) == integrated
    assert (cache.cache_info().hits, cache.cache_info().misses) == (hits + 2, misses)
    forget_propensities()
    assert thompson_propensity(as_ints, 14).hex() == integrated.hex()  # integrated again
    thompson_propensity(arms, 15)
    assert cache.cache_info().misses == 2  # since the last forget: arm 14, then arm 15


PINNED_BENCH_TOP = "0x1.d1498e137f04ep-1"
