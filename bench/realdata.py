"""``switchyard bench realdata``: graded prompts replayed through the live router.

    switchyard bench realdata --data ../shared/data/routing-val.jsonl --json results/realdata.json

Every strategy, from a cold start, over 3 seeds (prompt orders), with feedback on
every answer and on 20 % of them, each grade arriving 0-50 requests late
(:mod:`bench.realdata_run`); the budget pacer at cost targets of 2 %, 10 % and
30 % of the best single model's cost. Prints the table (quality and cost in % of
the best single model, utility ``q - lambda x $``, picks per model, the single
models, the best one in hindsight and the per-prompt oracle), writes the JSON
(``--json``: one object per strategy and feedback setting, the recommended one
marked ``"recommended": true``) and a cost-vs-quality PNG. Same arguments, same
bytes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

#: The strategy ``switchyard bench realdata`` recommends (marked in the JSON).
RECOMMENDED = "adaptive"
DEFAULT_STRATEGIES = (
    "adaptive",
    "adaptive+CONTEXT_LEARNING=false",
    "ucb1",
    "thompson",
    "thompson+THOMPSON_FRACTIONAL=true",
    "composite",
)
#: A pacer run: ``adaptive@10%`` is adaptive with a cost target of 10 % of the best model's.
PACER_SEPARATOR = "@"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, help="graded prompts (JSONL)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated prompt-order seeds")
    parser.add_argument("--lambda", dest="lam", type=float, default=20.0,
                        help="utility's weight of a dollar (q - lambda x $)")  # fmt: skip
    parser.add_argument("--strategies", help="comma-separated (default: every strategy)")
    parser.add_argument(
        "--targets", default="2,10,30", help="pacer cost targets, %% of the best model's cost"
    )
    parser.add_argument("--coverage", default="100,20", help="graded answers, %% (comma-separated)")
    parser.add_argument(
        "--max-delay", type=int, default=50, help="grades arrive 0..N requests late"
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder of the PNG")
    parser.add_argument("--no-plots", action="store_true")


def strategies(given: str | None, targets: str) -> list[str]:
    names = [s.strip() for s in (given or ",".join(DEFAULT_STRATEGIES)).split(",") if s.strip()]
    pacer = [f"{RECOMMENDED}{PACER_SEPARATOR}{t.strip()}%" for t in targets.split(",") if t.strip()]
    return names + pacer


def split_target(name: str) -> tuple[str, float | None]:
    """``adaptive@10%`` -> (``adaptive``, 10.0)."""
    base, _, target = name.partition(PACER_SEPARATOR)
    return base, float(target.rstrip("%")) if target else None


def evaluate(args: argparse.Namespace, log: bool = False) -> list[dict[str, Any]]:
    from bench.realdata_report import reference, references, summary
    from bench.realdata_run import Feedback, load, replay
    from bench.sim.policies import params_of

    prompts = load(args.data)
    ref = reference(prompts)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    rows: list[dict[str, Any]] = []
    for coverage in [float(c) / 100.0 for c in args.coverage.split(",") if c.strip()]:
        grading = Feedback(coverage, args.max_delay)
        feedback = {"coverage": coverage, "max_delay": args.max_delay, "label": grading.label}
        for name in strategies(args.strategies, args.targets):
            base, target_pct = split_target(name)
            target = None if target_pct is None else ref.cost * target_pct / 100.0
            started = time.perf_counter()
            runs = [replay(prompts, params_of(base), grading, seed, target) for seed in seeds]
            row = summary(name, feedback, runs, ref, args.lam, target_pct)
            row["recommended"] = name == RECOMMENDED
            rows.append(row)
            if log:
                print(f"  {name}, {grading.label}: {time.perf_counter() - started:.1f} s")
    return [*rows, *references(prompts, args.lam)]


def run(args: argparse.Namespace) -> int:
    from bench.realdata_report import dumps, markdown, plot

    started = time.perf_counter()
    rows = evaluate(args, log=True)
    print(markdown(rows))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(dumps(rows), encoding="utf-8")
        print(f"\nwrote {args.json}")
    if not args.no_plots:
        args.out.mkdir(parents=True, exist_ok=True)
        written = plot(rows, args.out / "realdata.png")
        print(f"wrote {written}" if written else "matplotlib is not installed: no plot")
    print(f"runtime {time.perf_counter() - started:.1f} s")
    return 0
