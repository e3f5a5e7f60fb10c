"""``switchyard bench reload``: policy changes under traffic on two workers.

Three light mocks serve ``--routes`` routes (default 4, on distinct partitions of
a 4-partition routing log, so both workers route). ``--requests`` (default 5,000)
are published at ``--rate`` per second; at a quarter, half and three quarters of
the way the policy changes three times, each way a user would:

1. ``switchyard policy apply`` with ``mock-c`` removed (version 2);
2. SIGHUP on worker 0 after its providers file was put back (version 3);
3. ``switchyard policy apply --version 2`` (a rollback, version 4).

Then, from the topics: every request answered exactly once; every decision made
under the version in force on its route at its log position (the positions of
the route's ``policy.changed`` events); no decision to a deployment its version
does not have; and a replay of the whole log (0 mismatches). Every process stops
at the end, on error or Ctrl-C. Output: a table and ``results/reload.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import queue_stack as qs
from bench.scaleout_metrics import answers, pick_routes
from bench.scaleout_stack import publish, rig, scaleout_stack, warm_up

if TYPE_CHECKING:
    from app.audit.log import RecordedLog
    from app.embedded.stack import EmbeddedStack


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--routes", type=int, default=4)
    parser.add_argument("--latency-ms", type=int, default=20, help="the mocks' fixed latency")
    parser.add_argument("--drain-timeout-s", type=float, default=180.0)
    parser.add_argument("--out", type=Path, default=Path("results"))


def run(args: argparse.Namespace) -> int:
    report = asyncio.run(_run(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reload.json").write_text(json.dumps(report, indent=2))
    print(render(report))
    return 0 if report["ok"] else 1


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="switchyard-reload-"))
    routes = pick_routes(args.routes, 4)
    async with (
        rig(args.latency_ms, workdir) as mocks,
        scaleout_stack("reload", mocks, routes, partitions=4, env={}, out=args.out) as stack,
    ):
        stack.add_worker()
        if not await warm_up(stack, routes, "reload", 120.0):
            raise RuntimeError("the workers answered no warm-up request in 120 s")
        items = [(f"rl-{i:06d}", routes[i % len(routes)]) for i in range(args.requests)]
        duration = args.requests / args.rate
        changes: list[dict[str, Any]] = []
        qs.progress("reload", f"{args.requests} requests at {args.rate:g}/s, 3 policy changes")
        await asyncio.gather(publish(stack, items, args.rate), _change(stack, duration, changes))
        return await _check(stack, [i for i, _ in items], changes, args.drain_timeout_s)


async def _change(stack: EmbeddedStack, duration: float, done: list[dict[str, Any]]) -> None:
    import yaml

    original = stack.providers_file.read_text()
    smaller = yaml.safe_load(original)
    smaller["providers"] = [p for p in smaller["providers"] if p["id"] != "mock-c"]
    for route in smaller["routes"].values():
        route["providers"] = [p for p in route["providers"] if p != "mock-c"]
    smaller_file = stack.workdir / "smaller.yaml"
    smaller_file.write_text(yaml.safe_dump(smaller))
    started = time.monotonic()
    steps = [
        ("apply (mock-c removed)", lambda: _cli(stack, "policy", "apply", str(smaller_file))),
        ("SIGHUP (file put back)", lambda: _sighup(stack, original)),
        ("apply --version 2 (rollback)", lambda: _cli(stack, "policy", "apply", "--version", "2")),
    ]
    for share, (label, action) in zip((0.25, 0.5, 0.75), steps, strict=True):
        await asyncio.sleep(max(0.0, started + share * duration - time.monotonic()))
        await asyncio.to_thread(action)
        done.append({"label": label, "at_s": round(time.monotonic() - started, 2)})
        qs.progress("reload", f"+{done[-1]['at_s']:.1f}s {label}")


def _cli(stack: EmbeddedStack, *args: str) -> None:
    command = [sys.executable, "-m", "app.cli", *args]
    done = subprocess.run(command, env=stack.worker_env(0), capture_output=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"switchyard {' '.join(args)}: {done.stderr.decode()[-300:]}")


def _sighup(stack: EmbeddedStack, text: str) -> None:
    stack.providers_file.write_text(text)
    process = stack.workers[0].process
    assert process is not None
    os.kill(process.pid, signal.SIGHUP)


async def _check(
    stack: EmbeddedStack, ids: list[str], changes: list[dict[str, Any]], timeout_s: float
) -> dict[str, Any]:
    from app.audit.log import read_broker
    from app.audit.replay import replay
    from app.client import all_answered, read_topics
    from app.policy.files import load_config
    from app.routing.policy import Policy

    t = stack.topics
    records = await read_topics(
        stack.broker.bootstrap, [t.responses], all_answered(ids, t.responses), timeout_s
    )
    got = answers(ids, records[t.responses])
    log = await read_broker(stack.broker.bootstrap, t)
    versions = in_force(log)
    report = replay(log, Policy(config=load_config(stack.providers_file)), allow_pending=True)
    ok = (
        not got["lost_ids"]
        and not versions["wrong_version"]
        and not versions["removed_chosen"]
        and report.mismatched == 0
        and report.ok
    )
    return {
        "ok": ok,
        "changes": changes,
        "answers": {k: v for k, v in got.items() if k != "lost_ids"},
        "versions": versions,
        "replay": {"decisions": report.recorded, "reproduced": report.reproduced,
                   "mismatched": report.mismatched, "versions": report.policy_versions},
    }  # fmt: skip


def in_force(log: RecordedLog) -> dict[str, Any]:
    """Per decision: the version it names vs the one in force on its route at its position."""
    from app.audit.log import events
    from app.contract import Decision, PolicyChanged

    switches: dict[str, list[tuple[int, int]]] = {}
    providers: dict[int, set[str]] = {}
    for entry in log.routing:
        event = entry.event
        if isinstance(event, PolicyChanged):
            switches.setdefault(event.route, []).append((entry.offset, event.version))
            ids = {str(p.get("id")) for p in event.document.config.get("providers", [])}
            providers.setdefault(event.version, ids)
    per_version: Counter[int] = Counter()
    wrong = removed = 0
    for decision in events(log.decisions):
        if not isinstance(decision, Decision) or not decision.request_id.startswith("rl-"):
            continue
        changes = sorted(switches.get(decision.route, []))
        expected = max((v for at, v in changes if at < decision.state_version), default=1)
        per_version[decision.policy_version] += 1
        wrong += decision.policy_version != expected
        removed += decision.provider not in providers.get(decision.policy_version, set())
    return {
        "decisions_per_version": dict(sorted(per_version.items())),
        "wrong_version": wrong,
        "removed_chosen": removed,
    }


def render(report: dict[str, Any]) -> str:
    a, v, r = report["answers"], report["versions"], report["replay"]
    lines = [
        "| check | result |",
        "|---|---|",
        f"| policy changes | {', '.join(c['label'] + ' @' + str(c['at_s']) + 's' for c in report['changes'])} |",  # noqa: E501
        f"| requests answered / lost | {a['answered']} / {a['lost']} |",
        f"| decisions per version | {v['decisions_per_version']} |",
        f"| decisions not under the version in force at their position | {v['wrong_version']} |",
        f"| decisions to a deployment their version lacks | {v['removed_chosen']} |",
        f"| replay: reproduced / mismatched of decisions | {r['reproduced']} / {r['mismatched']} of {r['decisions']} |",  # noqa: E501
        f"| ok | {report['ok']} |",
    ]
    return "\n".join(lines)
