"""``switchyard bench cluster``: a broker of three SIGKILLed or paused under traffic.

A one-worker stack (simulated seed-11 providers, time-compressed, as ``bench crash``)
runs on three replicated Apache Kafka nodes (app/embedded/kafka_cluster.py: every topic
3 copies, 2 in sync, producers ``acks=all``). Requests arrive at ``--rate`` for
``--minutes``. The node that leads the most partitions of the requests and routing
topics is the victim: ``--fault kill`` SIGKILLs it at a third of the run and restarts it
(same data directory) at two thirds; ``--fault pause`` SIGSTOPs it at a third and
SIGCONTs it ``--pause-s`` later.

Then, from the topics: sent, answered, lost (never answered), duplicate answers, errors
by type, latency (send → response record) before, during and after the fault; a replay
of the whole log (decisions and responses re-derived and compared); and whether the
victim is back in the ISR of every partition it holds (waited for, bounded). Every
process started is stopped at the end, on error, Ctrl-C or SIGTERM. Two shared cores run
three JVMs, the worker, the providers and this driver: numbers are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import queue_stack as qs
from bench.cluster_report import (
    FAULTS,
    Timeline,
    answer_summary,
    render,
    target_node,
    timeline,
)
from bench.replay_check import replay_whole_log

if TYPE_CHECKING:  # imported where used: `switchyard` imports the benches at every start
    from app.client import RequestPublisher
    from app.embedded.kafka_cluster import KafkaCluster
    from app.embedded.stack import EmbeddedStack


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the load")
    parser.add_argument("--fault", choices=FAULTS, default="kill")
    parser.add_argument("--pause-s", type=float, default=30.0, help="--fault pause: how long")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--drain-timeout-s", type=float, default=240.0)
    parser.add_argument("--isr-timeout-s", type=float, default=180.0, help="wait for the ISR")
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set in the worker's environment (repeatable), e.g. PRODUCER_REQUEST_TIMEOUT=10",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the report here too")


def worker_env(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs as an environment."""
    env = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise ValueError(f"--worker-env {pair!r}: NAME=VALUE")
        env[name] = value
    return env


def _body(request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "messages": [{"role": "user", "content": "hi"}]}


class TrackedPublisher:
    """A :class:`RequestPublisher` that also counts the records the broker refused."""

    def __init__(self, publisher: RequestPublisher) -> None:
        self.publisher = publisher
        self.sent: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.failed_ids: list[str] = []

    async def publish(self, request_id: str) -> None:
        self.sent[request_id] = time.time()
        producer = self.publisher._producer  # the delivery future RequestPublisher drops
        value = json.dumps(_body(request_id)).encode()
        delivery = await producer.send(self.publisher.topic, value=value)
        delivery.add_done_callback(lambda done: self._delivered(request_id, done))

    def _delivered(self, request_id: str, done: asyncio.Future[Any]) -> None:
        error = None if done.cancelled() else done.exception()
        if done.cancelled() or error is not None:
            kind = "cancelled" if error is None else type(error).__name__
            self.failures[kind] = self.failures.get(kind, 0) + 1
            self.failed_ids.append(request_id)


async def _publish_at_rate(tracked: TrackedPublisher, rate: float, duration_s: float) -> None:
    started, index = time.monotonic(), 0
    while True:
        due = started + index / rate
        if due - started >= duration_s:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        await tracked.publish(f"cluster-{index:06d}")
        index += 1
        if index % max(1, int(rate * 30)) == 0:
            qs.progress("cluster", f"+{time.monotonic() - started:.0f}s: {index} sent")
    await tracked.publisher.flush()


async def _inflict(
    cluster: KafkaCluster,
    args: argparse.Namespace,
    node: int,
    plan: Timeline,
    marks: dict[str, float],
) -> dict[str, Any]:
    """The fault at ``plan.fault_at``, the recovery at ``plan.recover_at`` (epoch marks);
    then the wait for the node to be back in every ISR (bounded)."""
    fault = args.fault
    started = marks["load_start"]
    marks["fault"] = await _sleep_until(started + plan.fault_at)
    if fault == "kill":
        await asyncio.to_thread(cluster.kill, node)
    else:
        cluster.pause(node)
    qs.progress("cluster", f"+{marks['fault'] - started:.1f}s: {fault} node {node}")
    marks["recovered"] = await _sleep_until(started + plan.recover_at)
    if fault == "kill":
        await asyncio.to_thread(cluster.restart, node)
    else:
        cluster.resume(node)
    marks["served"] = time.time()
    qs.progress("cluster", f"+{marks['served'] - started:.1f}s: node {node} serves again")
    isr = await _back_in_isr(cluster, node, args.isr_timeout_s)
    isr["seconds_after_recovery"] = marks["served"] - marks["recovered"] + isr["waited_s"]
    qs.progress("cluster", f"node {node} back in every ISR: {isr['back_in_isr']}")
    return isr


async def _sleep_until(at: float) -> float:
    """Sleep until epoch time ``at`` (not at all once it has passed): the time then."""
    await asyncio.sleep(max(0.0, at - time.time()))
    return time.time()


async def _back_in_isr(cluster: KafkaCluster, node: int, timeout_s: float) -> dict[str, Any]:
    try:
        waited = await cluster.wait_in_sync(node, timeout_s)
    except TimeoutError as exc:
        return {"back_in_isr": False, "waited_s": timeout_s, "missing": str(exc)}
    return {"back_in_isr": True, "waited_s": waited}


async def _run_on(
    stack: EmbeddedStack, cluster: KafkaCluster, args: argparse.Namespace, report: dict[str, Any]
) -> None:
    from app.client import RequestPublisher, all_answered, read_topics

    topics = stack.topics
    if not await qs.publish_one(stack, "cluster-warm-up", wait_s=120.0):
        raise RuntimeError("the worker answered no warm-up request in 120 s")
    leaders = await cluster.leader_counts([topics.requests, topics.routing])
    node = target_node(leaders)
    plan = timeline(args.fault, 60.0 * args.minutes, args.pause_s)
    report["fault"] = {"kind": args.fault, "node": node, "led_partitions": leaders[node]}
    report["leaders_at_start"] = {str(n): c for n, c in sorted(leaders.items())}
    qs.progress("cluster", f"{args.fault} node {node} (leads {leaders[node]}); {plan}")
    publisher = await RequestPublisher(stack.broker.bootstrap, topics.requests).start()
    tracked = TrackedPublisher(publisher)
    marks = {"load_start": time.time()}
    try:
        _, report["isr"] = await asyncio.gather(
            _publish_at_rate(tracked, args.rate, plan.end_at),
            _inflict(cluster, args, node, plan, marks),
        )
    finally:
        await publisher.stop()
    started = marks["load_start"]
    report["fault"].update(
        at_s=marks["fault"] - started,
        recovered_at_s=marks["recovered"] - started,
        served_at_s=marks["served"] - started,
    )
    report["publish"] = {"failures": tracked.failures, "failed_ids": tracked.failed_ids[:100]}
    qs.progress("cluster", f"published {len(tracked.sent)}; reading the answers")
    ids = list(tracked.sent)
    records = await read_topics(
        stack.broker.bootstrap,
        [topics.responses],
        all_answered(ids, topics.responses),
        timeout_s=args.drain_timeout_s,
        linger_s=3.0,
        stamp=True,
    )
    report["answers"] = answer_summary(
        tracked.sent, records[topics.responses], marks["fault"], marks["recovered"]
    )
    report["leaders_at_end"] = {
        str(n): c
        for n, c in sorted((await cluster.leader_counts([topics.requests, topics.routing])).items())
    }
    report["worker_running_at_end"] = stack.workers[0].running
    qs.progress("cluster", "replaying the whole log")
    report["replay"] = await replay_whole_log(stack)


async def cluster_bench(args: argparse.Namespace) -> dict[str, Any]:
    # The fold as the worker loads it now, not as a later edit of the tree would make it.
    import app.audit.replay  # noqa: F401
    from app.embedded.kafka_cluster import KafkaCluster
    from app.embedded.stack import EmbeddedStack
    from bench.throughput.procfs import load_average

    report: dict[str, Any] = {
        "rate": args.rate,
        "minutes": args.minutes,
        "worker_env": worker_env(args.worker_env),
        "load_average_start": load_average(),
    }
    errors: dict[str, str] = {}
    cluster = KafkaCluster()
    qs.progress("cluster", "starting three Kafka nodes")
    async with cluster:
        stack = EmbeddedStack(
            time_scale=0.05,
            seed=11,
            broker=cluster,
            partitions=args.partitions,
            env={"SWITCHYARD_LOG_LEVEL": "warn", **report["worker_env"]},
        )
        async with stack:
            try:
                await _run_on(stack, cluster, args, report)
            except Exception as exc:  # report what was measured
                errors["run"] = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(OSError):
                report["worker_log_tail"] = stack.workers[0].log_tail(10)
    report["errors"] = errors
    report["load_average_end"] = load_average()
    return report


def passed(report: dict[str, Any]) -> bool:
    """Nothing lost, the replay clean, the node back in every ISR, no error."""
    answers = report.get("answers")
    return (
        not report.get("errors")
        and answers is not None
        and answers["lost"] == 0
        and bool(report.get("replay", {}).get("ok"))
        and bool(report.get("isr", {}).get("back_in_isr"))
    )


def _render_or_error(report: dict[str, Any]) -> str:
    if "answers" not in report or "fault" not in report:
        return f"bench cluster measured nothing: {report.get('errors')}"
    return render(report)


def run(args: argparse.Namespace) -> int:
    path = args.json or Path("results") / "cluster.json"
    report = qs.run_and_write(lambda: cluster_bench(args), _render_or_error, path)
    return 0 if passed(report) else 1
