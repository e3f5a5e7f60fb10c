"""The built-in judge end to end on the embedded broker: a route whose judge
samples every answer → the answers' judge requests are routed, pinned, to the judge
deployment (the simulated providers answer them with a score) → the scores come back as
``GradeApplied`` (source judge) on the routing log → a replay of the whole log has 0
mismatches and every grade backed by its feedback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from stack_helpers import chat, collect, publish, running_stack, switchyard, watch

from app.embedded.broker import EmbeddedBroker
from app.embedded.simulated import SimulatedProviders
from app.embedded.simulated.providers_file import providers_config
from app.embedded.stack import EmbeddedStack
from app.grades.judge import answer_text, parse_score

pytestmark = pytest.mark.broker

JUDGE = "gemini-2.5-flash:gemini-2.5-flash"


def judged_providers(sim: SimulatedProviders) -> str:
    config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale)
    config["routes"]["chat"]["judge"] = {
        "deployment": JUDGE,
        "sample_rate": 1.0,
        "rubric": "A correct, complete and concise answer scores 1.",
    }
    return str(yaml.safe_dump(config, sort_keys=False))


@pytest.fixture
async def judged_stack(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    env = {"SWITCHYARD_FEEDBACK_MATCH_GRACE_S": "3", "SWITCHYARD_TICK_INTERVAL_S": "1"}
    options = {"time_scale": 0.05, "seed": 3, "env": env, "providers_yaml": judged_providers}
    async with running_stack(broker, "t", **options) as running:
        yield running


def latest(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["request_id"]: r for r in records}


async def test_a_judged_route_grades_its_answers_and_replays(judged_stack: EmbeddedStack) -> None:
    stack, topics = judged_stack, judged_stack.topics
    ids = [f"jd-{i}" for i in range(8)]
    await publish(stack, [chat(i) for i in ids])
    first = latest((await collect(stack, {topics.responses: len(ids)}))[topics.responses])
    parents = {i: first[i] for i in ids if i in first}
    # Every ok answer but the judge deployment's own is judged (allow_self is off).
    judged = {i for i, r in parents.items() if r["status"] == "ok" and r["deployment"] != JUDGE}
    assert len(parents) == len(ids) and judged, parents

    wanted = {topics.responses: len(ids) + len(judged), topics.decisions: len(ids) + len(judged)}
    seen = await collect(stack, wanted)
    responses = latest(seen[topics.responses])
    verdicts = {i: responses[f"judge-{i}"] for i in judged}
    assert {r for r in responses if r.startswith("judge-")} == {f"judge-{i}" for i in judged}
    for decision in seen[topics.decisions]:
        if decision["request_id"].startswith("judge-"):
            assert decision["deployment"] == JUDGE and decision["candidate_filter"] == "pinned"

    scores = {
        i: parse_score(answer_text(r["completion"]))
        for i, r in verdicts.items()
        if r["status"] == "ok"
    }
    assert scores and None not in scores.values(), verdicts
    grades, _, _ = await watch(stack, grades=len(scores), letters=0)
    assert len({g["id"] for g in grades}) == len(grades) == len(scores), grades
    for grade in grades:
        parent = grade["request_id"]
        assert grade["source"] == "judge" and grade["score"] == scores[parent]
        assert grade["deployment"] == parents[parent]["deployment"] != JUDGE

    code, out = await switchyard(stack, "replay", "--json", "--allow-pending")
    report = json.loads(out)
    assert code == 0 and report["mismatched"] == 0, report
    assert report["reproduced"] == report["decisions"] >= len(ids) + len(judged)
    assert report["grades"] == {"recorded": len(scores), "verified": len(scores), "problems": []}
