"""``switchyard bench cache``: the response cache's hit rate, cost saved and wrong answers.

Traffic: the questions of :mod:`bench.cache_questions` (20 groups of 4 paraphrases of
one question, and a near miss beside each group: worded like it, answered otherwise),
each asked ``--repeats`` times (an exact repeat is what an exact cache can serve), in a
seeded order, one every 2 s at ``temperature: 0``. Every request is accepted by the
live :func:`app.ingest.accept` (its cache key and embedding) and folded by the one
:class:`app.routing.driver.Driver`; a dispatched attempt is answered at once with its
question's meaning as the answer, built by the executor's own
:func:`app.execution.outcome.build_outcome` (800 input and 250 output tokens at $3 and
$15 per 1M: the reference workload).

Per cache (none, exact, semantic at each ``--thresholds``): requests answered from the
cache (hit rate), provider calls, their cost and the cost saved against no cache, and
the **wrong-answer risk**: hits whose source question means something else (its answer
is another meaning's), as a share of the hits. ``ideal``: the share of requests whose
meaning was already answered (what a perfect semantic cache would serve).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.config.schema import RoutingConfig, parse_config
from app.contract import Dispatch, StatusClass
from app.execution.outcome import CallResult, build_outcome, feedback
from app.routing.driver import Driver
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.understanding import embedding
from bench.cache_questions import questions
from bench.ingested import admitted, ingest

ORIGIN = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SPACING_S = 2.0
TOKENS_IN, TOKENS_OUT = 800, 250
PRICE_IN, PRICE_OUT = 3.0, 15.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=2, help="times each question is asked")
    parser.add_argument(
        "--thresholds", default="0.80,0.85,0.90,0.95", help="semantic thresholds, comma-separated"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")


@dataclass
class Row:
    cache: str
    requests: int = 0
    hits: int = 0
    exact_hits: int = 0
    semantic_hits: int = 0
    wrong: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    saved_usd: float = 0.0
    fold_us: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def wrong_share(self) -> float:
        return self.wrong / self.hits if self.hits else 0.0


def build_config(cache: dict[str, Any] | None) -> RoutingConfig:
    provider = {
        "id": "p0",
        "base_url": "https://p0.example.test/v1",
        "cost_per_mtok_input": PRICE_IN,
        "cost_per_mtok_output": PRICE_OUT,
        "max_concurrency": 1000,
        "models": [{"name": "chat-model"}],
    }
    route: dict[str, Any] = {"providers": ["p0"]}
    if cache is not None:
        route["cache"] = {"ttl_s": 86_400.0, "max_entries": 1024, **cache}
    return parse_config({"providers": [provider], "routes": {"chat": route}}, {})


def traffic(repeats: int, seed: int) -> list[tuple[str, str]]:
    asked = [item for item in questions() for _ in range(repeats)]
    random.Random(f"switchyard-cache/{seed}").shuffle(asked)
    return asked


def simulate(name: str, cache: dict[str, Any] | None, asked: list[tuple[str, str]]) -> Row:
    config = build_config(cache)
    policy = Policy(config, RoutingParams())
    driver = Driver(lambda: policy)
    row = Row(name)
    meaning_of: dict[str, str] = {}
    position = 0
    for n, (meaning, question) in enumerate(asked):
        request_id = f"q{n:04d}"
        meaning_of[request_id] = meaning
        now = ORIGIN + n * SPACING_S
        body = {
            "request_id": request_id,
            "model": "chat",
            "temperature": 0,
            "messages": [{"role": "user", "content": question}],
        }
        accepted = admitted(ingest(body, n, datetime.fromtimestamp(now, UTC), config))
        started = time.perf_counter()
        step = driver.fold(accepted, position)
        row.fold_us += (time.perf_counter() - started) * 1e6
        position += 1
        row.requests += 1
        for decision in step.decisions:  # answered from the cache
            trace = decision.cache
            assert trace is not None
            row.hits += 1
            row.exact_hits += trace.kind == "exact"
            row.semantic_hits += trace.kind == "semantic"
            row.saved_usd += trace.saved_usd
            row.wrong += meaning_of[trace.source_request_id] != meaning
        for dispatch in step.dispatches:
            finished = answer(config, dispatch, meaning, now + 0.8)
            row.calls += 1
            row.cost_usd += finished.outcome.cost_usd
            driver.fold(finished, position)
            position += 1
    return row


def answer(config: RoutingConfig, dispatch: Dispatch, meaning: str, now: float) -> Any:
    message = {"role": "assistant", "content": f"the answer about {meaning}"}
    result = CallResult(
        StatusClass.SUCCESS,
        200,
        800.0,
        tokens_in=TOKENS_IN,
        tokens_out=TOKENS_OUT,
        finish_reason="stop",
        completion={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]},
    )
    provider = config.provider_by_id[dispatch.decision.provider]
    when = datetime.fromtimestamp(now, UTC)
    outcome = build_outcome(dispatch, result, provider, occurred_at=when, final=True)
    return feedback(dispatch, outcome, result)


def run(args: argparse.Namespace) -> int:
    asked = traffic(args.repeats, args.seed)
    scenarios: list[tuple[str, dict[str, Any] | None]] = [("none", None), ("exact", {})]
    missing = embedding.missing_reason()
    thresholds = [float(t) for t in args.thresholds.split(",") if t.strip()]
    if missing is None:
        for t in thresholds:
            scenarios.append((f"semantic {t:.2f}", {"semantic": {"threshold": t}}))
    rows = [simulate(name, cache, asked) for name, cache in scenarios]
    baseline = rows[0].cost_usd
    meanings = len({meaning for meaning, _ in asked})
    ideal = (len(asked) - meanings) / len(asked)
    print(
        f"{len(asked)} requests: {len({q for _, q in asked})} questions of {meanings} meanings, "
        f"each asked {args.repeats} times (seed {args.seed}); ideal hit rate {ideal:.1%}"
    )
    if missing is not None:
        print(f"semantic rows skipped: {missing}")
    print(
        f"{'cache':<15} {'hit rate':>8} {'exact':>6} {'semantic':>8} {'calls':>6} "
        f"{'cost':>9} {'saved':>7} {'wrong hits':>10} {'fold µs':>8}"
    )
    for row in rows:
        saved = 1 - row.cost_usd / baseline if baseline else 0.0
        print(
            f"{row.cache:<15} {row.hit_rate:>8.1%} {row.exact_hits:>6} {row.semantic_hits:>8} "
            f"{row.calls:>6} {'$' + format(row.cost_usd, '.4f'):>9} {saved:>7.1%} "
            f"{f'{row.wrong} ({row.wrong_share:.1%})':>10} {row.fold_us / row.requests:>8.1f}"
        )
    if args.json is not None:
        found = [{**asdict(r), "hit_rate": r.hit_rate, "wrong_share": r.wrong_share} for r in rows]
        args.json.write_text(json.dumps({"ideal_hit_rate": ideal, "rows": found}, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
