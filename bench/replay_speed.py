"""Benchmark: how fast ``switchyard replay`` re-derives decisions (goal: >= 20,000/s).

    python -m bench.replay_speed                      # from the repository root
    python -m bench.replay_speed --requests 20000 --strategy thompson --profile

Builds a synthetic recorded log with :func:`app.audit.synthetic.synthetic_log`
(the live fold against simulated providers: four deployments, one with a
concurrency cap, failures and retries), writes it as an export, then times, best
of ``--rounds``:

* ``fold``: :func:`app.audit.replay.rederive` alone, the pure re-derivation
  (``handle`` on every routing-log event);
* ``replay``: fold plus the exact comparison with the recorded decisions;
* ``read``: parsing the export back (:func:`app.audit.log.read_export`).

Rates are decisions re-derived per second (and routing-log events per second),
by wall clock and by this process's CPU time (steadier when the machine is busy).
``--profile`` prints the top functions of one ``fold`` under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.audit.export import write_export
from app.audit.log import read_export
from app.audit.replay import rederive, replay
from app.audit.synthetic import Profile, synthetic_log
from app.config import ProviderConfig, RoutingConfig
from app.events import StatusClass
from app.routing.policy import Policy
from app.routing.propensity import forget_propensities
from app.settings import RoutingParams, Topics


def bench_policy(strategy: str) -> Policy:
    def provider(pid: str, cost: float, **extra: int) -> ProviderConfig:
        return ProviderConfig.model_validate(
            {
                "id": pid,
                "base_url": f"https://{pid}.example.test/v1",
                "models": [{"name": "m1"}],
                "cost_per_mtok_input": cost,
                "cost_per_mtok_output": 3 * cost,
                **extra,
            }
        )

    config = RoutingConfig(
        providers=[
            provider("cerebras-a", 0.2),
            provider("groq-b", 0.3, max_concurrency=4),
            provider("openai-c", 5.0),
            provider("mistral-d", 2.0),
        ]
    )
    return Policy(config, RoutingParams(BANDIT_STRATEGY=strategy))  # type: ignore[call-arg]


PROFILES = {
    "cerebras-a:m1": Profile(success=0.85, latency_ms=1500.0),
    "groq-b:m1": Profile(success=0.9, latency_ms=700.0, failure=StatusClass.TIMEOUT),
    "openai-c:m1": Profile(success=0.97, latency_ms=900.0),
    "mistral-d:m1": Profile(success=0.93, latency_ms=1100.0, failure=StatusClass.RATE_LIMITED),
}


def best_of(rounds: int, run: Callable[[], object]) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds of ``rounds`` runs (CPU: less noisy on a busy box).

    Each run starts with thompson's propensity cache empty (``_shape``'s stays warm)."""
    wall, cpu = [], []
    for _ in range(rounds):
        forget_propensities()
        started, started_cpu = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return min(wall), min(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--strategy", default="ucb1", choices=["ucb1", "thompson"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    policy = bench_policy(args.strategy)
    started = time.perf_counter()
    log = synthetic_log(policy, PROFILES, args.requests, interval_s=0.02)
    built = time.perf_counter() - started
    decisions, events = len(log.decisions), len(log.routing)
    print(
        f"synthetic log: {args.requests} requests, {events} routing events, {decisions} decisions "
        f"({args.strategy}), built in {built:.1f} s"
    )
    report = replay(log, policy)
    assert report.ok, "the synthetic log must replay exactly"

    with tempfile.TemporaryDirectory() as directory:
        write_export(log, Path(directory), Topics())
        read = best_of(args.rounds, lambda: read_export(Path(directory)))
    fold = best_of(args.rounds, lambda: rederive(log.routing, policy))
    full = best_of(args.rounds, lambda: replay(log, policy))
    for name, (wall, cpu) in (("fold", fold), ("replay", full), ("read", read)):
        print(
            f"{name:<7} wall {wall:7.3f} s {decisions / wall:9,.0f} decisions/s   "
            f"cpu {cpu:7.3f} s {decisions / cpu:9,.0f} decisions/s {events / cpu:9,.0f} events/s"
        )
    print(
        f"from an export (read + replay), cpu: {decisions / (read[1] + full[1]):,.0f} decisions/s"
    )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(rederive, log.routing, policy)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
        print(out.getvalue())


if __name__ == "__main__":
    main()
