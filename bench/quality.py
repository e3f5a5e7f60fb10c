"""``switchyard bench quality``: every policy through every scenario, against the oracle.

    switchyard bench quality                                  # S1-S8, default policies
    switchyard bench quality --requests 3000 --scenarios S2,S8 --policies ucb1,static_priority

Each (scenario, policy) cell is one deterministic simulation
(:func:`bench.sim.engine.simulate`); cells run in parallel processes
(``--jobs``) and are assembled in a fixed order, so the JSON is a function of
the arguments alone: same seed, same file. Prints a markdown table, writes
``quality-seed<S>-n<N>.json`` and, when matplotlib is importable, one PNG per
scenario into ``--out`` (default ``results/``, not committed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

DEFAULT_REQUESTS = 5000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (cheap: imports nothing beyond the standard library)."""
    parser.add_argument(
        "--requests", type=int, default=DEFAULT_REQUESTS,
        help="requests per scenario and policy, spread over the scenario's 2 simulated hours",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", help="comma-separated ids, e.g. S1,S2 (default: all)")
    parser.add_argument(
        "--policies",
        help="comma-separated baselines, BANDIT_STRATEGY values and NAME+VAR=value variants "
        "(default: round_robin, static_priority, every seed strategy, oracle)",
    )
    parser.add_argument("--out", type=Path, default=Path("results"), help="output folder")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args: argparse.Namespace) -> int:
    from bench import report
    from bench.sim.evaluation import dumps, evaluate
    from bench.sim.policies import DEFAULT_POLICIES
    from bench.sim.scenarios import SCENARIOS

    started = time.perf_counter()
    scenarios = _names(args.scenarios, SCENARIOS, str.upper)
    policies = _names(args.policies, DEFAULT_POLICIES, str)
    try:
        document = evaluate(scenarios, policies, args.requests, args.seed, args.jobs, log=True)
    except (KeyError, ValueError) as exc:
        print(f"switchyard bench quality: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"quality-seed{args.seed}-n{args.requests}.json"
    path.write_text(dumps(document), encoding="utf-8")
    print(report.markdown(document))
    print(f"\nwrote {path}")
    if not args.no_plots:
        written = report.plots(document, args.out)
        if written is None:
            print("matplotlib is not installed (pip install -e '.[bench]'): no plots")
        for png in written or []:
            print(f"wrote {png}")
    print(f"runtime {time.perf_counter() - started:.1f} s ({args.jobs} processes)")
    return 0


def _names(given: str | None, default: Iterable[str], normalise: Callable[[str], str]) -> list[str]:
    if given is None:
        return list(default)
    return [normalise(name.strip()) for name in given.split(",") if name.strip()]
