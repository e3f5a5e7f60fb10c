"""``switchyard bench affinity``: cache/session affinity's hit rate and cost.

Multi-turn conversations over 4 identical deployments whose simulated prompt caches
report cached tokens only for a prefix they saw in the last 5 minutes
(:mod:`bench.affinity_sim`), folded through the live router's one driver. Each
conversation starts with the application's shared system prompt (about 1,500
tokens, cached by every provider that serves the application) and its own first
question; its later turns carry the whole history.

Scenarios (the same conversations, seeded, each from a cold start):

* ``sessions, affinity on`` — requests carry a ``session_id`` (affinity on: the default);
* ``contexts, affinity on`` — no session id: the prompt prefix is pinned;
* ``affinity off`` — the route's affinity disabled: the strategy alone (UCB1);
* the same three with a short system prompt (nothing cacheable before a
  conversation's own history passes 1,024 tokens: a pin must wait for a lucky read);
* ``breaker`` — sessions, affinity on, and one deployment failing every call (503)
  from the middle of the run: its breaker opens after 5 failures, and every session
  pinned to it must move on its next turn.

A *hit* is a turn (2nd or later) whose cache read covers its previous turn's whole
prompt. Cost is the executor's: cached input at $0.30, input $3, output $15 per 1M.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.routing.affinity import session_key
from bench.affinity_sim import ORIGIN, Conversation, Stats, World, build_config, filler

DEPLOYMENTS = 4
LONG_SYSTEM_CHARS, SHORT_SYSTEM_CHARS = 6000, 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=8, help="turns per conversation")
    parser.add_argument("--spread", type=float, default=600.0, help="conversation starts, s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    sessions: bool
    affinity: bool
    system_chars: int = LONG_SYSTEM_CHARS
    #: Seconds after which ``p0`` fails every call (None: never).
    fail_at: float | None = None


SCENARIOS = (
    Scenario("sessions, affinity on", sessions=True, affinity=True),
    Scenario("contexts, affinity on", sessions=False, affinity=True),
    Scenario("affinity off", sessions=True, affinity=False),
    Scenario("short prompt: sessions, on", True, True, SHORT_SYSTEM_CHARS),
    Scenario("short prompt: contexts, on", False, True, SHORT_SYSTEM_CHARS),
    Scenario("short prompt: affinity off", True, False, SHORT_SYSTEM_CHARS),
)


def simulate(scenario: Scenario, args: argparse.Namespace) -> World:
    world = World(build_config(DEPLOYMENTS, scenario.affinity), seed=args.seed)
    if scenario.fail_at is not None:
        world.failing["p0:chat-model"] = scenario.fail_at
    rng = random.Random(f"switchyard-affinity/conversations/{args.seed}")
    system = filler(random.Random("system"), scenario.system_chars)
    for number in range(args.conversations):
        talk = Conversation(
            number=number,
            turns=args.turns,
            session=f"session-{number}" if scenario.sessions else None,
            messages=[{"role": "system", "content": system}],
        )
        world.schedule(rng.uniform(0.0, args.spread), "turn", talk)
    world.run()
    return world


def row(scenario: Scenario, stats: Stats) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "turns": stats.turns,
        "hit_rate": round(stats.hit_rate, 4),
        "cached_share": round(stats.cached_tokens / max(1, stats.input_tokens), 4),
        "cost_usd": round(stats.cost_usd, 4),
        "affinity_decisions": stats.rules.get("affinity", 0),
        "errors": stats.errors,
    }


def breaker_row(world: World, fail_at: float) -> dict[str, Any]:
    """Did the sessions pinned to the failing deployment move at once?"""
    dead = "p0:chat-model"
    opened = world.open_at.get(dead)
    pinned = world.pinned_at_open.get(dead, set())
    #: Session key -> where its first turn after the opening went, and why.
    next_turns: dict[str, tuple[str, str]] = {}
    to_dead: dict[str, int] = {}
    for decision in world.stats.decisions:
        if opened is None or decision.occurred_at.timestamp() - ORIGIN < opened:
            continue
        if decision.deployment == dead:
            to_dead[decision.selection_rule] = to_dead.get(decision.selection_rule, 0) + 1
        talk = world.talks[decision.request_id]
        key = session_key(None, talk.session or "")
        if key in pinned and key not in next_turns:
            next_turns[key] = (decision.deployment, decision.selection_rule)
    state = world.driver.route_state("chat")
    return {
        "failing_from_s": fail_at,
        "breaker_opened_after_s": None if opened is None else round(opened - fail_at, 3),
        "failed_attempts": world.stats.failed_attempts,
        "sessions_pinned_at_open": len(pinned),
        "next_turn_elsewhere": sum(d != dead for d, _ in next_turns.values()),
        # Only the breaker's own half-open probe may send one there (one per 60 s).
        "next_turn_as_half_open_probe": sum(
            d == dead and r == "half_open_probe" for d, r in next_turns.values()
        ),
        "next_turn_on_failing_otherwise": sum(
            d == dead and r != "half_open_probe" for d, r in next_turns.values()
        ),
        "decisions_to_failing_after_open": to_dead,
        "breaker_at_end": state.arm(dead).breaker.state.value,
        "errors_answered": world.stats.errors,
        "hit_rate": round(world.stats.hit_rate, 4),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | turns | hit rate | cached input share | cost USD | affinity decisions |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['turns']} | {r['hit_rate']:.1%} | {r['cached_share']:.1%} "
            f"| {r['cost_usd']:.4f} | {r['affinity_decisions']} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    rows = [row(s, simulate(s, args).stats) for s in SCENARIOS]
    print(
        f"{args.conversations} conversations x {args.turns} turns over {DEPLOYMENTS} "
        f"deployments (seed {args.seed})\n"
    )
    print(markdown(rows))
    fail_at = args.spread
    breaker = Scenario("breaker", sessions=True, affinity=True, fail_at=fail_at)
    world = simulate(breaker, args)
    report = breaker_row(world, fail_at)
    print(f"\nbreaker: p0 fails every call from t={fail_at:g}s: {json.dumps(report)}")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "breaker": report}, indent=1))
        print(f"wrote {args.json}")
    return 0
