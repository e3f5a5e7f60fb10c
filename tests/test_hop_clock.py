"""``bench hops``'s stage clock (bench/hop_clock) and how its stamps become stages."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import hop_clock
from bench.hop_clock import SITE_DIR, STAMPS_ENV, TARGETS
from bench.hops import AHEAD_STAGES, BESIDE, STAGES, WorkerStamps, read_stamps, stage_times
from bench.throughput.driver import Trace


@pytest.mark.parametrize(("module", "attribute", "parameters"), TARGETS)
def test_every_wrapped_function_is_there_with_its_parameters(
    module: str, attribute: str, parameters: tuple[str, ...]
) -> None:
    """A rename in the agents, Faust or aiokafka fails here, not as a report of no stages."""
    found: object = importlib.import_module(module)
    for name in attribute.split("."):
        found = getattr(found, name)
    assert callable(found)
    names = list(inspect.signature(found).parameters)
    assert names[: len(parameters)] == list(parameters)


def test_every_target_has_its_wrapper() -> None:
    assert {module for module, _, _ in TARGETS} == set(hop_clock._WRAPPERS)


def test_the_site_directory_installs_the_clock_in_a_process_given_a_directory(
    tmp_path: Path,
) -> None:
    """A process started with the site directory on its path and the variable set writes
    stamps from the wrapped functions; without the variable it wraps nothing."""
    script = textwrap.dedent(
        """
        import agents.handoff as handoff
        wrapped = handoff.launch.__qualname__ != "launch"
        print("wrapped" if wrapped else "plain")
        """
    )
    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": f"{SITE_DIR}:{root}", "PATH": "/usr/bin:/bin"}
    plain = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert plain.stdout.strip().splitlines()[-1] == "plain", plain.stderr[-2000:]
    clocked = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, STAMPS_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert clocked.stdout.strip().splitlines()[-1] == "wrapped", clocked.stderr[-2000:]
    assert list(tmp_path.glob("stamps-*.tsv"))


def _trace(request_id: str, published: float, received: float) -> Trace:
    return Trace(
        request_id, published=published, received=received, outcomes=1,
        provider_ms=20.0, e2e_ms=(received - published) * 1000.0,
    )  # fmt: skip


T = 1000.0
#: One fetched batch of partition 2 starting at offset 7, holding offsets 7 and 8.
FETCHED = [
    (T + 0.001, "fetched", "llm.requests", 2, 7),
    (T + 0.0012, "thread_returned", "llm.requests", 2, 7),
    (T + 0.0015, "main_loop_got", "llm.requests", 2, 7),
]


def stamps_of(tmp_path: Path, lines: list[tuple[object, ...]]) -> WorkerStamps:
    """The worker's stamps, as read back from a file holding ``lines``."""
    path = tmp_path / "stamps-1.tsv"
    path.write_text("".join("\t".join([f"{w:.6f}", *map(str, rest)]) + "\n" for w, *rest in lines))
    return read_stamps([str(path)], "llm.requests")


def passages(request_id: str, at_ms: dict[str, float]) -> list[tuple[object, ...]]:
    """A request's stamps, each ``at_ms`` milliseconds after ``T``."""
    return [(T + ms / 1000.0, what, request_id) for what, ms in at_ms.items()]


def test_stamps_become_stages_for_the_requests_that_have_them_all(tmp_path: Path) -> None:
    t = T
    lines = [
        *FETCHED,
        (t + 0.0009, "fetched", "llm.responses", 0, 7),  # another topic: not the request's
        (t + 0.002, "ingest", "a", 2, 8),
        *passages("a", {"routing_sent": 2.5, "routing_acked": 3.5, "launched": 4.0,
                        "call_started": 4.2, "call_ended": 24.2, "publishing": 24.5}),
        (t + 0.002, "ingest", "b", 2, 6),  # before any batch of its partition: no stages
    ]  # fmt: skip
    stamps = stamps_of(tmp_path, lines)
    traces = [_trace("a", t, t + 0.027), _trace("b", t, t + 0.027), _trace("c", t, t + 0.03)]
    stages, added = stage_times(traces, stamps)
    assert added == pytest.approx([7.0])
    got = {name: values[0] for name, values in stages.items()}
    expected = [1.0, 0.2, 0.3, 0.5, 0.5, 1.0, 0.5, 0.2, 20.0, 0.3, 2.5]
    assert list(got) == [name for name, *_ in STAGES]
    assert list(got.values()) == pytest.approx(expected, abs=1e-3)


def test_a_call_started_ahead_of_its_fold_is_timed_on_its_own_way(tmp_path: Path) -> None:
    """The routing record's acknowledgement runs beside a call ahead: it is timed, not
    counted on the way; a request with both kinds of start (a call ahead taken back) is
    on neither way."""
    t = T
    ahead = {"launched_ahead": 2.6, "routing_sent": 2.7, "call_started": 2.8,
             "routing_acked": 4.0, "call_ended": 22.8, "publishing": 23.0}  # fmt: skip
    lines = [
        *FETCHED,
        (t + 0.002, "ingest", "a", 2, 7),
        *passages("a", ahead),
        (t + 0.002, "ingest", "b", 2, 8),
        *passages("b", {**ahead, "launched": 5.0}),
    ]
    stamps = stamps_of(tmp_path, lines)
    traces = [_trace("a", t, t + 0.0255), _trace("b", t, t + 0.0255)]
    assert stage_times(traces, stamps, "fold") == ({name: [] for name, *_ in STAGES}, [])
    stages, added = stage_times(traces, stamps, "ahead")
    assert added == pytest.approx([5.5])
    got = {name: values[0] for name, values in stages.items()}
    assert list(got) == [name for name, *_ in AHEAD_STAGES + BESIDE]
    expected = [1.0, 0.2, 0.3, 0.5, 0.6, 0.2, 20.0, 0.2, 2.5, 1.3]
    assert list(got.values()) == pytest.approx(expected, abs=1e-3)
