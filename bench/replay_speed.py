"""Benchmark: how fast ``switchyard replay`` re-derives decisions (goal: >= 20,000/s).

    python -m bench.replay_speed                      # from the repository root
    python -m bench.replay_speed --requests 20000 --strategy thompson --profile
    python -m bench.replay_speed --jobs 2             # 1 job and 2 jobs side by side

Builds a synthetic recorded log with :func:`bench.logs.synthetic.synthetic_log`
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

``--jobs N`` (N > 1) also times the replay of the export as ``switchyard replay
--from-export`` does it: in one process (the export read and parsed, then replayed:
``--jobs 1``), and with its routes folded and compared in N worker processes
(:mod:`app.audit.replay_parallel`: the export read as texts, each record parsed by the
worker that needs it) and in one (what the split costs), rounds alternated: wall clock
for each and the ratio, and the CPU time of the parent and of each worker (the
parent's plus the slowest worker's is about what the wall clock would be on idle
cores). The workers are started before the timed rounds, as ``switchyard replay``
starts them while it reads the log; one more run starts and stops its own
(``replay(jobs=N)``). It also times both from the parsed log in memory, where the
workers parse again what the process had parsed. The log has ``--routes`` routes
(default 1; 4 with ``--jobs`` > 1: a group per route), each with the four
deployments, requests spread evenly.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.audit.export import write_export
from app.audit.log import RecordedLog, read_export
from app.audit.log_texts import REPLAY_STREAMS, read_export_texts
from app.audit.replay import ReplayReport, rederive, replay
from app.audit.replay_parallel import FoldPool, Timings
from app.config.schema import RouteConfig, RoutingConfig
from app.contract import StatusClass
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.routing.propensity import forget_propensities
from app.settings import Topics
from bench.logs.synthetic import Profile, provider, synthetic_log


def bench_policy(strategy: str, routes: int = 1) -> Policy:
    providers = [
        provider("cerebras-a", 0.2),
        provider("groq-b", 0.3, max_concurrency=4),
        provider("openai-c", 5.0),
        provider("mistral-d", 2.0),
    ]
    config = RoutingConfig(providers=providers)
    if routes > 1:  # each route with every deployment (and an arm state of its own)
        every = RouteConfig(providers=[p.id for p in providers])
        names = [f"route-{n}" for n in range(routes)]
        config = RoutingConfig(
            providers=providers, routes=dict.fromkeys(names, every), default_route=names[0]
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
    parser.add_argument("--jobs", type=int, default=1, help="also replay with N worker processes")
    parser.add_argument("--routes", type=int, help="routes (default 1; 4 with --jobs > 1)")
    args = parser.parse_args()
    routes = args.routes or (4 if args.jobs > 1 else 1)
    print("load average at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))

    policy = bench_policy(args.strategy, routes)
    started = time.perf_counter()
    log = synthetic_log(policy, PROFILES, args.requests, interval_s=0.02)
    built = time.perf_counter() - started
    decisions, events = len(log.decisions), len(log.routing)
    print(
        f"synthetic log: {args.requests} requests on {routes} route(s), {events} routing events, "
        f"{decisions} decisions ({args.strategy}), built in {built:.1f} s"
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
    if args.jobs > 1:
        parallel(log, policy, args.jobs, args.rounds)

    print("load average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(rederive, log.routing, policy)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
        print(out.getvalue())


@dataclass
class Timed:
    wall: float
    cpu: float
    #: Parallel runs: what the pool says about the last replay.
    timings: Timings | None = None

    @property
    def workers(self) -> list[float]:
        return self.timings.worker_cpu_s if self.timings is not None else []

    @property
    def critical(self) -> float:
        """CPU on the longest path: the parent's and the slowest worker's."""
        return self.cpu + max(self.workers, default=0.0)


def timed(run: Callable[[], ReplayReport], pool: FoldPool | None = None) -> Timed:
    forget_propensities()
    started, started_cpu = time.perf_counter(), time.process_time()
    report = run()
    result = Timed(time.perf_counter() - started, time.process_time() - started_cpu)
    assert report.ok, "the synthetic log must replay exactly"
    if pool is not None:
        assert pool.last is not None and not pool.last.fell_back
        result.timings = pool.last
    return result


def parallel(log: RecordedLog, policy: Policy, jobs: int, rounds: int) -> None:
    """The replay of an export in one process (read parsed, then replayed: ``--jobs 1``),
    in 1 worker and in ``jobs`` workers (read as texts, parsed and compared in the
    workers), rounds alternated (the machine's load weighs on all alike), best of each
    by wall clock; then the same from the parsed log in memory."""
    decisions = len(log.decisions)
    with tempfile.TemporaryDirectory() as directory:
        export = Path(directory)
        write_export(log, export, Topics())

        def one_process() -> ReplayReport:
            return replay(read_export(export, streams=REPLAY_STREAMS), policy)

        def workers(used: FoldPool) -> Callable[[], ReplayReport]:
            return lambda: replay(read_export_texts(export), policy, pool=used)

        with FoldPool(jobs) as pool, FoldPool(1) as alone:
            started = time.perf_counter()
            pool.start()
            start_s = time.perf_counter() - started
            alone.start()
            runs: dict[str, list[Timed]] = {}
            for _ in range(rounds):
                for name, call, used in (
                    ("one", one_process, None),
                    ("single", workers(alone), alone),
                    ("many", workers(pool), pool),
                    ("parsed one", lambda: replay(log, policy), None),
                    ("parsed many", lambda: replay(log, policy, pool=pool), pool),
                ):
                    runs.setdefault(name, []).append(timed(call, used))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cold = timed(lambda: replay(read_export_texts(export), policy, jobs=jobs))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cold_workers = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        parse_recorded = best_of(
            rounds, lambda: read_export(export, streams=("decisions", "responses"))
        )
    a, s, b, pa, pb = (min(runs[n], key=lambda t: t.wall) for n in runs)
    print(f"\nreplay with {jobs} jobs (workers started in {start_s:.2f} s), from an export:")
    print(
        f"  1 process  wall {a.wall:7.3f} s {decisions / a.wall:9,.0f} decisions/s   "
        f"cpu {a.cpu:7.3f} s (read parsed, then replayed)"
    )
    for name, one in (("1 worker", s), (f"{jobs} workers", b)):
        assert one.timings is not None
        each = ", ".join(
            f"{w:.3f} (fold {f:.3f})"
            for w, f in zip(one.workers, one.timings.worker_fold_s, strict=True)
        )
        print(
            f"  {name:<10} wall {one.wall:7.3f} s {decisions / one.wall:9,.0f} decisions/s   "
            f"cpu parent {one.cpu:.3f} s + workers {each} s "
            f"(total {one.cpu + sum(one.workers):.3f} s)"
        )
    print(
        f"  ratio      wall {a.wall / b.wall:.2f}x   cpu {a.cpu / b.critical:.2f}x "
        f"(1 process's cpu / parent's + slowest worker's); {jobs} workers / 1 worker, "
        f"wall {s.wall / b.wall:.2f}x"
    )
    assert b.timings is not None
    t = b.timings
    rest = b.wall - t.split_s - t.wait_s - t.merge_s
    print(
        f"  parent: reading the texts' keys and sending the chunks {t.split_s:.3f} s, while "
        f"the workers fold and compare {t.wait_s:.3f} s, the report {t.merge_s:.3f} s, the "
        f"rest (reading the manifest and feedback) {rest:.3f} s; "
        f"the workers began their chunks {', '.join(f'{r:.3f}' for r in t.received_s)} s "
        f"after they were sent"
    )
    print(
        f"  of the 1 process's cpu, parsing the recorded decisions and responses: "
        f"{parse_recorded[1]:.3f} s (the workers compare texts instead)"
    )
    print(
        f"  from the parsed log in memory: 1 process wall {pa.wall:.3f} s, {jobs} workers "
        f"{pb.wall:.3f} s ({pa.wall / pb.wall:.2f}x), cpu {pa.cpu / pb.critical:.2f}x "
        f"(the workers parse what the process had parsed already)"
    )
    print(
        f"  replay(jobs={jobs}) of the export starting and stopping its own workers: wall "
        f"{cold.wall:.3f} s ({a.wall / cold.wall:.2f}x), cpu parent {cold.cpu:.3f} s "
        f"+ workers {cold_workers:.3f} s"
    )


if __name__ == "__main__":
    main()
