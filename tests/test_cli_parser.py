"""``switchyard``'s parser: a command other than ``bench`` does not import the benchmarks
(their modules and the SDKs they use cost most of a command's start), and ``bench``
still gets every benchmark's own options."""

from __future__ import annotations

import json
import subprocess
import sys

from app.cli import build_parser


def _bench_modules_after(code: str) -> list[str]:
    names = "sorted(m for m in sys.modules if m == 'bench' or m.startswith('bench.'))"
    probe = f"import json, sys\n{code}\nprint(json.dumps({names}))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return list(json.loads(out.stdout.splitlines()[-1]))


def test_a_command_other_than_bench_imports_no_benchmark() -> None:
    assert (
        _bench_modules_after("from app.cli import build_parser; build_parser(benches=False)") == []
    )
    loaded = _bench_modules_after("from app.cli import build_parser; build_parser()")
    assert "bench.outage" in loaded  # the check can see a benchmark loaded


def test_bench_still_parses_each_benchmarks_own_options() -> None:
    args = build_parser(benches=True).parse_args(["bench", "cache", "--repeats", "3"])
    assert args.benchmark == "cache" and args.repeats == 3
    listed = build_parser(benches=False).parse_args(["bench", "cache"])
    assert listed.benchmark == "cache"  # listed, without options, for other commands
