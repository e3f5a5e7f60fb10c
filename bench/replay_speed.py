"""Benchmark: how fast ``switchyard replay`` re-derives decisions (goal: >= 20,000/s).

    python -m bench.replay_speed                      # from the repository root
    python -m bench.replay_speed --requests 20000 --strategy thompson --profile
    python -m bench.replay_speed --jobs 2             # 1 job and 2 jobs side by side

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

``--jobs N`` (N > 1) also times the replay with its routes folded in N worker
processes (:mod:`app.audit.replay_parallel`), and in one (what sending the records
to a worker and their results back costs), rounds alternated with the one-job
replay: wall clock for each and the ratio, and the CPU time of the parent and of
each worker (the parent's plus the slowest worker's is about what the wall clock
would be on idle cores). The workers are started before the timed rounds, as ``switchyard
replay`` starts them while it reads the log; one more run starts and stops its own
(``replay(jobs=N)``). It prints what pickling costs: the chunks sent, the results
returned. The log has ``--routes`` routes (default 1; 4 with ``--jobs`` > 1: a
group per route), each with the four deployments, requests spread evenly.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pickle
import pstats
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.audit.export import write_export
from app.audit.log import RecordedLog, read_export
from app.audit.replay import policy_book, rederive, replay
from app.audit.replay_parallel import (
    FoldPool,
    bare,
    bare_book,
    chunks,
    plan,
    rederive_parallel,
    route_keys,
)
from app.audit.replay_worker import ROUTING_RECORD, FoldTask, fold_chunk
from app.audit.synthetic import Profile, synthetic_log
from app.config.schema import ProviderConfig, RouteConfig, RoutingConfig
from app.contract import StatusClass
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.routing.propensity import forget_propensities
from app.settings import Topics


def bench_policy(strategy: str, routes: int = 1) -> Policy:
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
    #: Parallel runs: each worker's CPU seconds, and the parent's split / wait / merge.
    workers: list[float] = field(default_factory=list)
    steps: tuple[float, float, float] = (0.0, 0.0, 0.0)
    received: list[float] = field(default_factory=list)

    @property
    def critical(self) -> float:
        """CPU on the longest path: the parent's and the slowest worker's."""
        return self.cpu + max(self.workers, default=0.0)


def timed(run: Callable[[], object], pool: FoldPool | None = None) -> Timed:
    forget_propensities()
    started, started_cpu = time.perf_counter(), time.process_time()
    run()
    result = Timed(time.perf_counter() - started, time.process_time() - started_cpu)
    if pool is not None and pool.last is not None:
        last = pool.last
        result.workers, result.steps = last.worker_cpu_s, (last.split_s, last.wait_s, last.merge_s)
        result.received = last.received_s
    return result


def parallel(log: RecordedLog, policy: Policy, jobs: int, rounds: int) -> None:
    """The replay with 1 job, in 1 worker and in ``jobs`` workers, rounds alternated (the
    machine's load weighs on all alike), best of each by wall clock."""
    decisions = len(log.decisions)
    with FoldPool(jobs) as pool, FoldPool(1) as alone:
        started = time.perf_counter()
        pool.start()
        start_s = time.perf_counter() - started
        alone.start()
        one: list[Timed] = []
        single: list[Timed] = []
        many: list[Timed] = []
        folds: list[Timed] = []
        book = policy_book(log.routing)
        for _ in range(rounds):
            one.append(timed(lambda: replay(log, policy)))
            single.append(timed(lambda: replay(log, policy, pool=alone), alone))
            many.append(timed(lambda: replay(log, policy, pool=pool), pool))
            folds.append(timed(lambda: rederive_parallel(log.routing, policy, book, pool), pool))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cold = timed(lambda: replay(log, policy, jobs=jobs))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cold.workers = [(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)]
    a, s, b, f = (min(runs, key=lambda t: t.wall) for runs in (one, single, many, folds))
    print(f"\nreplay with {jobs} jobs ({pool.jobs} workers, started in {start_s:.2f} s):")
    print(
        f"  1 job      wall {a.wall:7.3f} s {decisions / a.wall:9,.0f} decisions/s   "
        f"cpu {a.cpu:7.3f} s"
    )
    for name, run in (("1 worker", s), (f"{jobs} workers", b)):
        workers = ", ".join(f"{w:.3f}" for w in run.workers)
        print(
            f"  {name:<10} wall {run.wall:7.3f} s {decisions / run.wall:9,.0f} decisions/s   "
            f"cpu parent {run.cpu:.3f} s + workers {workers} s "
            f"(total {run.cpu + sum(run.workers):.3f} s)"
        )
    print(
        f"  ratio      wall {a.wall / b.wall:.2f}x   cpu {a.cpu / b.critical:.2f}x "
        f"(1 job's cpu / parent's + slowest worker's); {jobs} workers / 1 worker, "
        f"wall {s.wall / b.wall:.2f}x"
    )
    split, wait, merge = b.steps
    print(
        f"  parent: split and send {split:.3f} s, while the workers fold {wait:.3f} s, "
        f"merge {merge:.3f} s, the rest (keys, comparison, report) "
        f"{b.wall - split - wait - merge:.3f} s; the workers began their chunks "
        f"{', '.join(f'{r:.3f}' for r in b.received)} s after the split"
    )
    print(
        f"  fold alone, {jobs} workers: wall {f.wall:.3f} s {decisions / f.wall:,.0f} "
        f"decisions/s, workers {', '.join(f'{w:.3f}' for w in f.workers)} s"
    )
    print(
        f"  replay(jobs={jobs}) starting and stopping its own workers: wall {cold.wall:.3f} s "
        f"({a.wall / cold.wall:.2f}x), cpu parent {cold.cpu:.3f} s "
        f"+ workers {cold.workers[0]:.3f} s"
    )
    pickling(log, policy, jobs)


def pickling(log: RecordedLog, policy: Policy, jobs: int) -> None:
    """What the workers do that the one-job replay does not, for the whole log (split
    between them): parse the records, serialise what they re-derive; and what the chunks
    and the results cost to pickle and unpickle."""
    keys = route_keys(log.routing)
    book = bare_book(policy_book(log.routing))
    tasks = [FoldTask(bare(policy), book, c) for c in chunks(log.routing, keys, plan(keys, jobs))]
    sent, sent_s, sent_back_s = _pickled(tasks)
    results = [fold_chunk(task) for task in tasks]
    returned, returned_s, returned_back_s = _pickled(results)
    started = time.process_time()
    for task in tasks:
        for raw in task.chunk.raws:
            ROUTING_RECORD.validate_json(raw)
    parsed = time.process_time() - started
    again = rederive(log.routing, policy)
    started = time.process_time()
    for record in [*again.decisions, *again.responses]:
        record.model_dump_json()
    dumped = time.process_time() - started
    print(
        f"  in the workers, all told: parsing the records {parsed:.3f} s, "
        f"the re-derived records as JSON {dumped:.3f} s"
    )
    print(
        f"  pickling: chunks {sent / 1e6:.1f} MB, {sent_s:.3f} s + {sent_back_s:.3f} s unpickled; "
        f"results {returned / 1e6:.1f} MB, {returned_s:.3f} s + {returned_back_s:.3f} s unpickled"
    )


def _pickled(values: Sequence[object]) -> tuple[int, float, float]:
    started = time.process_time()
    blobs = [pickle.dumps(value, pickle.HIGHEST_PROTOCOL) for value in values]
    dumped = time.process_time()
    for blob in blobs:
        pickle.loads(blob)
    return sum(map(len, blobs)), dumped - started, time.process_time() - dumped


if __name__ == "__main__":
    main()
