"""Thompson sampling, its seeded draws and its propensity."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from factories import (
    T0,
    accepted,
    arm,
    dep,
    fold,
    outcome,
    policy,
    provider,
    route_state,
)

from app.contract import StatusClass
from app.routing import bandit
from app.routing.feedback import apply_outcome
from app.routing.params import Strategy
from app.routing.propensity import thompson_propensity
from app.routing.select import select
from app.routing.state import ArmState, RouteState
from app.routing.strategies import ALGORITHM_VERSION

# --------------------------------------------------------------------------- Thompson (§3)


@pytest.mark.parametrize(
    ("reward", "expected"),
    [(1.0, (2.0, 1.0)), (0.5, (2.0, 1.0)), (0.4999, (1.0, 2.0)), (0.0, (1.0, 2.0))],
)
def test_thompson_update_rule(reward: float, expected: tuple[float, float]) -> None:
    assert ArmState().alpha == 1.0
    assert ArmState().beta == 1.0
    assert bandit.thompson_update(1.0, 1.0, reward) == expected


def test_thompson_update_through_outcomes() -> None:
    pol = policy(provider("a"))
    a = ArmState()
    for reward in (0.9, 0.5, 0.2, 0.7, 0.1, 0.6):
        a = apply_outcome(a, outcome("r", dep("a"), reward=reward), T0, pol)
    assert (a.alpha, a.beta) == (5.0, 3.0)  # 4 successes, 2 failures on top of Beta(1, 1)
    assert a.pulls == 6
    # A rate-limited attempt says nothing of the deployment's worth: no Thompson failure.
    a = apply_outcome(a, outcome("r", dep("a"), status=StatusClass.RATE_LIMITED), T0, pol)
    assert (a.alpha, a.beta, a.pulls, a.rate_limited) == (5.0, 3.0, 6, 1)


def _thompson_state() -> RouteState:
    return route_state({dep(p): arm(alpha=3.0, beta=3.0) for p in ("a", "b", "c")})


def test_thompson_same_request_and_attempt_same_choice() -> None:
    pol = policy(provider("a"), provider("b"), provider("c"), strategy="thompson")
    state = _thompson_state()
    first = select(state, "chat", "req-42", 1, [], pol)
    second = select(state, "chat", "req-42", 1, [], pol)
    assert first.chosen == second.chosen
    assert first.candidates == second.candidates
    assert first.propensity == second.propensity
    for candidate in first.candidates:
        assert candidate.score == candidate.factors["sample"]
        assert candidate.factors["alpha"] == 3.0
        assert candidate.factors["beta"] == 3.0
        assert 0.0 <= candidate.factors["sample"] <= 1.0
    assert first.chosen is not None
    best = max(first.candidates, key=lambda c: c.score or 0.0)
    assert first.chosen.deployment == best.deployment


def test_thompson_different_requests_can_differ() -> None:
    pol = policy(provider("a"), provider("b"), provider("c"), strategy="thompson")
    state = _thompson_state()
    chosen = set()
    for i in range(40):
        selection = select(state, "chat", f"req-{i}", 1, [], pol)
        assert selection.chosen is not None
        chosen.add(selection.chosen.deployment)
    assert chosen == {dep("a"), dep("b"), dep("c")}
    # The attempt number is part of the seed too.
    samples = {
        select(state, "chat", "req-0", attempt, [], pol).candidates[0].score
        for attempt in (1, 2, 3)
    }
    assert len(samples) == 3


def test_thompson_propensity_bounds_and_dominant_arm() -> None:
    pol = policy(provider("a"), provider("b"), strategy="thompson")
    state = route_state(
        {dep("a"): arm(alpha=100.0, beta=1.0), dep("b"): arm(alpha=1.0, beta=100.0)}
    )
    for i in range(10):
        selection = select(state, "chat", f"req-{i}", 1, [], pol)
        assert selection.chosen is not None
        assert selection.chosen.deployment == dep("a")
        assert 0.99 <= selection.propensity <= 1.0
    # And the loser's propensity is near 0.
    assert thompson_propensity([(100.0, 1.0), (1.0, 100.0)], 1) <= 1e-12


def test_thompson_propensity_balanced_arms() -> None:
    posteriors = [(2.0, 2.0), (2.0, 2.0)]
    p0 = thompson_propensity(posteriors, 0)
    p1 = thompson_propensity(posteriors, 1)
    assert p0 == pytest.approx(0.5, abs=1e-5)
    assert p0 + p1 == pytest.approx(1.0, abs=1e-5)
    pol = policy(provider("a"), provider("b"), provider("c"), strategy="thompson")
    for i in range(20):
        selection = select(_thompson_state(), "chat", f"q{i}", 1, [], pol)
        # Three equal arms: a third each, whichever won the draw.
        assert selection.propensity == pytest.approx(1 / 3, abs=1e-4)


def test_thompson_fold_is_reproducible_and_labelled() -> None:
    pol = policy(provider("a"), provider("b"), provider("c"), strategy="thompson")
    events = [accepted(f"r{i}", T0 + i) for i in range(12)]
    one = fold(events, pol)
    two = fold(events, pol)
    assert [d.model_dump() for d in one.decisions] == [d.model_dump() for d in two.decisions]
    assert one.decisions[0].strategy == "thompson"
    assert one.decisions[0].algorithm_version == ALGORITHM_VERSION[Strategy.THOMPSON]


def test_seeded_rng_is_stable_text_seeding() -> None:
    assert (
        bandit.seeded_rng("thompson", "r", 1).random()
        == bandit.seeded_rng("thompson", "r", 1).random()
    )
    assert (
        bandit.seeded_rng("thompson", "r", 1).random()
        != bandit.seeded_rng("thompson", "r", 2).random()
    )
    assert isinstance(bandit.seeded_rng("x"), random.Random)


def test_seeded_rng_independent_of_hash_seed() -> None:
    code = "from app.routing import bandit; print(repr(bandit.seeded_rng('t', 'req', 1).random()))"
    root = Path(__file__).resolve().parents[1]
    values = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert values == {repr(bandit.seeded_rng("t", "req", 1).random())}
