"""``switchyard bench realdata``'s pure parts, on a tiny generated data file."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from bench import realdata
from bench.realdata_report import dumps, reference, references
from bench.realdata_run import Feedback, load, replay
from bench.sim.policies import params_of

MODELS = {"org-a/cheap": (0.6, 1e-5), "org-b/mid": (0.9, 5e-4), "org-c/dear": (0.92, 1e-2)}


def _data(tmp_path: Path, count: int = 240) -> Path:
    rng = random.Random(7)
    lines = []
    for i in range(count):
        arms = {
            m: {"reward": round(min(1.0, max(0.0, q + rng.uniform(-0.1, 0.1))), 2), "cost": c}
            for m, (q, c) in MODELS.items()
        }
        lines.append(json.dumps({"prompt": f"Question {i}: what is {i} + {i}?", "arms": arms}))
    path = tmp_path / "tiny.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_adaptive_without_priors_tries_every_model_and_converges(tmp_path: Path) -> None:
    prompts = load(_data(tmp_path))
    result = replay(prompts, params_of("adaptive"), Feedback(1.0, 10), seed=0)
    assert all(result.picks[m] >= 1 for m in MODELS)
    assert result.decisions == len(prompts)
    last = result.quality[-100:]
    assert sum(q > 0.75 for q in last) >= 97  # the mid model (0.9 +- 0.1), not the cheap one
    assert sum(result.cost[-100:]) < 100 * 1e-3  # nor the dear one


def test_pacer_holds_the_mean_cost_at_its_target(tmp_path: Path) -> None:
    prompts = load(_data(tmp_path))
    target = 2e-3
    result = replay(prompts, params_of("adaptive"), Feedback(1.0, 10), 0, target)
    mean = sum(result.cost) / len(result.cost)
    assert mean == pytest.approx(target, rel=0.1)


def test_references_best_single_model_and_oracle(tmp_path: Path) -> None:
    prompts = load(_data(tmp_path))
    ref = reference(prompts)
    assert ref.model == "org-c/dear"
    rows = {r["strategy"]: r for r in references(prompts, 20.0)}
    assert rows["single:org-c/dear"]["quality_pct_of_best"] == 100.0
    assert rows["best_single_in_hindsight"]["model"] == "org-b/mid"
    assert rows["oracle"]["utility"] >= rows["best_single_in_hindsight"]["utility"]


def test_same_seed_same_bytes_and_the_recommended_strategy_is_marked(tmp_path: Path) -> None:
    args = argparse.Namespace(
        data=_data(tmp_path, 80),
        seeds="0,1",
        lam=20.0,
        strategies="adaptive,ucb1",
        targets="10",
        coverage="100,20",
        max_delay=5,
    )
    first, second = dumps(realdata.evaluate(args)), dumps(realdata.evaluate(args))
    assert first == second
    rows = json.loads(first)
    marked = [r for r in rows if r.get("recommended")]
    assert {r["strategy"] for r in marked} == {"adaptive"} and len(marked) == 2
    for row in (r for r in rows if r["kind"] == "strategy"):
        assert {"feedback", "quality_pct_of_best", "cost_pct_of_best", "utility", "picks"} <= set(
            row
        )
    assert realdata.split_target("adaptive@10%") == ("adaptive", 10.0)
