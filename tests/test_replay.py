"""Replay, tamper evidence, counterfactuals, export and audit on logs made by the live fold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import T0, accepted, dep, finish, fold, params, provider, routing_config

from app.audit.counterfactual import _Run, counterfactual, outcome_model, simulate
from app.audit.explain import build_trace
from app.audit.explain import render as render_trace
from app.audit.export import read_policy, redact_record, write_export, write_policy
from app.audit.log import Entry, RecordedLog, mentions, parse, read_export
from app.audit.replay import rederive, render, replay
from app.audit.side_by_side import render as render_side_by_side
from app.cli import main
from app.contract import AttemptFinished, StatusClass
from app.execution.outcome import finish as executor_finish
from app.execution.outcome import recorded_result
from app.routing.policy import Policy
from app.settings import Topics
from bench.logs.synthetic import Profile, synthetic_log

CHEAP, MID, DEAR = dep("cerebras-x"), dep("groq-x"), dep("openai-x")
PROFILES = {
    CHEAP: Profile(success=0.85, latency_ms=1500.0),
    MID: Profile(success=0.9, latency_ms=900.0, failure=StatusClass.TIMEOUT),
    DEAR: Profile(success=0.97, latency_ms=600.0),
}


def three(**overrides: Any) -> Policy:
    """Three deployments with distinct prices; the mid one takes 3 calls at a time."""
    config = routing_config(
        provider("cerebras-x", cost_per_mtok_input=0.2, cost_per_mtok_output=0.6),
        provider("openai-x", cost_per_mtok_input=5.0, cost_per_mtok_output=15.0),
        provider("groq-x", max_concurrency=3, cost_per_mtok_input=0.3, cost_per_mtok_output=0.9),
    )
    return Policy(config, params(**overrides))


@pytest.fixture(scope="module")
def recorded() -> RecordedLog:
    return synthetic_log(three(), PROFILES, 600)


def tampered(log: RecordedLog, index: int, **outcome_changes: Any) -> RecordedLog:
    """A copy of ``log`` whose routing entry ``index`` (an AttemptFinished) was altered."""
    entry = log.routing[index]
    assert isinstance(entry.event, AttemptFinished)
    event = entry.event
    changed = event.model_copy(update={"outcome": event.outcome.model_copy(update=outcome_changes)})
    routing = list(log.routing)
    routing[index] = parse("routing", entry.partition, entry.offset, changed.model_dump_json())
    return RecordedLog(log.source, routing, log.decisions, log.outcomes, log.responses)


def test_replay_reproduces_every_decision(recorded: RecordedLog) -> None:
    report = replay(recorded, three())
    assert report.recorded == len(recorded.decisions) > 600
    assert (report.reproduced, report.mismatched, report.mismatches) == (report.recorded, 0, [])
    assert report.ok and not report.config_differs
    assert any(e.event and e.event.attempt > 1 for e in recorded.decisions)  # retries happened
    assert "mismatched: 0" in render(report)


@pytest.mark.parametrize("strategy", ["thompson", "adaptive"])
def test_thompson_and_adaptive_replay_exactly(strategy: str) -> None:
    pol = three(strategy=strategy)
    log = synthetic_log(pol, PROFILES, 300, seed=7)
    report = replay(log, pol)
    assert report.ok and report.reproduced == report.recorded > 300
    assert {e.event.strategy for e in log.decisions if e.event} == {strategy}


def _a_success_past_offset_20(recorded: RecordedLog) -> int:
    """The index in the routing log of the first successful attempt's end past offset 20."""
    return next(
        i
        for i, e in enumerate(recorded.routing)
        if isinstance(e.event, AttemptFinished)
        and e.event.outcome.status_class is StatusClass.SUCCESS
        and e.offset > 20
    )


def test_an_altered_outcome_breaks_later_decisions(recorded: RecordedLog) -> None:
    index = _a_success_past_offset_20(recorded)
    forged = tampered(recorded, index, latency_ms=29_000.0)
    report = replay(forged, three())
    assert not report.ok and report.mismatched > 0
    offset = recorded.routing[index].offset
    differing = [m for m in report.mismatches if m.kind == "differs" and m.record == "decision"]
    # Only decisions taken after the altered feedback change, and the latency shows why.
    states = {d.id: d.state_version for d in (e.event for e in recorded.decisions) if d}
    assert all(states[m.event_id] > offset for m in differing)
    assert any("latency_bonus" in line for line in differing[0].differences)
    assert "FAILED" in render(report)


def test_an_altered_status_is_caught_too(recorded: RecordedLog) -> None:
    index = _a_success_past_offset_20(recorded)
    forged = tampered(recorded, index, reward=0.0, status_class=StatusClass.SERVER_ERROR)
    assert replay(forged, three()).mismatched > 0


def test_an_altered_response_is_caught(recorded: RecordedLog) -> None:
    responses = list(recorded.responses)
    index, original = next(
        (i, e.event) for i, e in enumerate(responses) if e.event and e.event.status == "ok"
    )
    forged = original.model_copy(update={"attempts": original.attempts + 1})
    responses[index] = Entry(0, index, forged.model_dump_json(), forged)
    log = RecordedLog(recorded.source, recorded.routing, recorded.decisions, [], responses)
    report = replay(log, three())
    assert not report.ok and report.count("differs", "response") == 1 and report.mismatched == 0
    assert "completion" not in " ".join(report.mismatches[0].differences)


def test_missing_and_forged_decisions_are_reported(recorded: RecordedLog) -> None:
    decisions = list(recorded.decisions)
    dropped = decisions.pop(5)
    forged_event = decisions[0].event
    assert forged_event is not None and dropped.event is not None
    other = next(d for d in (CHEAP, MID, DEAR) if d != forged_event.deployment)
    forged = forged_event.model_copy(update={"deployment": other})
    decisions[0] = Entry(0, 0, forged.model_dump_json(), forged)
    log = RecordedLog(recorded.source, recorded.routing, decisions, [], recorded.responses)
    report = replay(log, three())
    assert report.count("not_recorded") == 1 and report.mismatched == 1
    assert report.pending == 0  # a gap in the middle is never "still pending"
    assert report.mismatches[0].differences == [
        f"deployment: recorded {other!r}, replayed {forged_event.deployment!r}"
    ]
    assert not report.ok


def test_outputs_a_live_router_has_not_published_yet_are_pending(recorded: RecordedLog) -> None:
    cut = recorded.routing[-30].offset  # the router has not processed the last 30 events
    again = rederive(recorded.routing, three())
    made = [
        *zip(again.decisions, again.decision_origins, strict=True),
        *zip(again.responses, again.response_origins, strict=True),
    ]
    late = {r.id for r, (_, offset) in made if offset >= cut}
    decisions = [e for e in recorded.decisions if e.event and e.event.id not in late]
    responses = [e for e in recorded.responses if e.event and e.event.id not in late]
    log = RecordedLog(recorded.source, recorded.routing, decisions, [], responses)
    strict = replay(log, three())
    assert not strict.ok and strict.pending == len(strict.mismatches) > 0
    assert "--allow-pending" in render(strict)
    assert replay(log, three(), allow_pending=True).ok


def test_duplicates_are_skipped_as_the_router_skipped_them() -> None:
    pol = three()
    events = [
        accepted("r1", T0),
        finish("r1", CHEAP, T0 + 1),
        finish("r1", CHEAP, T0 + 1),  # redelivered feedback
        accepted("r2", T0 + 2),
        accepted("r2", T0 + 2),  # redelivered request, first attempt still open
    ]
    folded = fold(events, pol)
    routing = [parse("routing", 0, i, e.model_dump_json()) for i, e in enumerate(events)]
    decisions = [
        parse("decisions", 0, i, d.model_dump_json()) for i, d in enumerate(folded.decisions)
    ]
    responses = [
        parse("responses", 0, i, r.model_dump_json()) for i, r in enumerate(folded.responses)
    ]
    report = replay(RecordedLog("test", routing, decisions, [], responses), pol)
    assert report.ok and (report.recorded, report.skipped, report.responses_reproduced) == (2, 2, 1)


def test_another_config_is_called_out(recorded: RecordedLog) -> None:
    report = replay(recorded, three(latency_weight=0.3))
    assert report.config_differs and not report.ok
    assert "config hash differs" in render(report)


# --------------------------------------------------------------------------- counterfactual


def test_the_same_policy_as_a_counterfactual_changes_nothing(recorded: RecordedLog) -> None:
    result = simulate(recorded, three())
    assert {source for _, source in result.outcomes.values()} == {"recorded"}
    report = counterfactual(recorded, three(), "same", runs=1)
    (run,) = report.runs
    assert run.first_changed == 0 and run.share == report.recorded.share
    assert run.total_cost_usd == pytest.approx(report.recorded.total_cost_usd)


def test_a_higher_cost_weight_shifts_the_share_to_the_cheap_deployment(
    recorded: RecordedLog,
) -> None:
    report = counterfactual(recorded, three(cost_weight=3.0), "BANDIT_COST_WEIGHT=3.0", runs=3)
    before = report.recorded.share[CHEAP]
    assert all(run.share[CHEAP] > before + 0.15 for run in report.runs)
    assert all(run.share[DEAR] < report.recorded.share[DEAR] for run in report.runs)
    assert all(run.first_changed > 0 and run.sources["estimated"] > 0 for run in report.runs)
    assert all(run.total_cost_usd < report.recorded.total_cost_usd for run in report.runs)
    text = render_side_by_side(report)
    assert "recorded (measured)" in text and "alternative (estimated)" in text
    assert "not measurements" in text


def test_a_drawn_outcome_is_built_as_the_executor_builds_it(recorded: RecordedLog) -> None:
    """The alternative's attempt ends as the executor would end it with the drawn call's
    result: its own decision's context, and a local-first answer below the dispatch's
    confidence is not final (the old copy kept the source's context and ignored it)."""
    alt = three()
    run = _Run(recorded, alt, outcome_model(recorded), 0)
    (step,) = fold([accepted("cf-1")], alt).steps
    (sent,) = step.dispatches
    decision = sent.decision.model_copy(update={"context": "acme|general|short|text"})
    sent = sent.model_copy(update={"min_confidence": 0.9, "decision": decision})
    source = next(
        e.outcome
        for e in (entry.event for entry in recorded.routing)
        if isinstance(e, AttemptFinished) and e.outcome.status_class is StatusClass.SUCCESS
    )
    source = source.model_copy(update={"confidence": 0.5, "context": "someone|else"})
    synthetic = run.synthetic(sent, source)
    provider = alt.config.provider_by_id[sent.decision.provider]
    _, executors = executor_finish(
        sent, recorded_result(source), provider, occurred_at=synthetic.occurred_at
    )

    unnamed = {"id": ""}
    assert synthetic.outcome.model_copy(update=unnamed) == executors.outcome.model_copy(
        update=unnamed
    )
    assert synthetic.model_copy(update={**unnamed, "outcome": executors.outcome}) == (
        executors.model_copy(update=unnamed)
    )
    assert not synthetic.outcome.final and synthetic.retry is not None
    assert synthetic.outcome.context == decision.context


def test_a_deployment_never_observed_is_a_pooled_guess(recorded: RecordedLog) -> None:
    config = routing_config(
        provider("cerebras-x"),
        provider("openai-x"),
        provider("groq-x", max_concurrency=3),
        provider("mistral-new"),
    )
    report = counterfactual(recorded, Policy(config, params()), "new provider", runs=1)
    (run,) = report.runs
    assert run.sources["pooled"] > 0 and dep("mistral-new") in run.share
    assert "never observed" in render_side_by_side(report)


# --------------------------------------------------------------------------- export, audit


def test_export_round_trip_replays_exactly(recorded: RecordedLog, tmp_path: Path) -> None:
    manifest = write_export(recorded, tmp_path / "plain", Topics())
    assert manifest["counts"]["routing"] == len(recorded.routing)
    again = read_export(tmp_path / "plain")
    assert [e.raw for e in again.routing] == [e.raw for e in recorded.routing]
    assert replay(again, three()).ok

    write_export(recorded, tmp_path / "redacted", Topics(), redact=True)
    text = "".join(
        (tmp_path / "redacted" / f"{name}.jsonl").read_text() for name in ("routing", "responses")
    )
    assert "synthetic answer" in (tmp_path / "plain" / "routing.jsonl").read_text()
    assert "synthetic prompt" not in text and "synthetic answer" not in text
    assert replay(read_export(tmp_path / "redacted"), three()).ok


def test_a_request_id_is_found_whatever_its_characters() -> None:
    event = accepted('café-ünï "quoted"', T0)
    raw = event.model_dump_json()
    assert mentions(raw, event.request.request_id) and not mentions(raw, "café")
    assert mentions(redact_record("routing", raw), event.request.request_id)


def test_export_lines_are_plain_json(recorded: RecordedLog, tmp_path: Path) -> None:
    write_export(recorded, tmp_path, Topics())
    first = json.loads((tmp_path / "routing.jsonl").read_text().splitlines()[0])
    assert set(first) == {"partition", "offset", "event"}
    decision = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[0])
    assert {"deployment", "candidates", "excluded", "propensity", "state_version"} <= set(decision)
    # Rewritten by another tool (pretty, reordered): still readable.
    lines = (tmp_path / "routing.jsonl").read_text().splitlines()
    rewritten = [
        json.dumps(dict(reversed(json.loads(line).items())), indent=None) for line in lines
    ]
    (tmp_path / "routing.jsonl").write_text("\n".join(rewritten) + "\n")
    assert replay(read_export(tmp_path), three()).ok


def test_audit_shows_both_attempts_and_why(recorded: RecordedLog) -> None:
    retried = next(e.event for e in recorded.decisions if e.event and e.event.attempt == 2)
    trace = build_trace(recorded, retried.request_id)
    assert trace is not None
    first, second = trace["attempts"][:2]
    assert first["outcome"]["status_class"] != "success" and not first["outcome"]["final"]
    tried = first["decision"]["deployment"]
    assert {"deployment": tried, "reason": "already_tried"}.items() <= {
        **next(e for e in second["decision"]["excluded"] if e["deployment"] == tried)
    }.items()
    chosen = second["decision"]["candidates"]
    assert chosen[0]["chosen"] and chosen[0]["rank"] == 1
    assert trace["response"]["status"] in {"ok", "error"}
    text = render_trace(trace)
    assert "attempt 2" in text and "already tried by an earlier attempt" in text
    assert "synthetic prompt" not in json.dumps(trace) + text
    assert build_trace(recorded, "no-such-request") is None


# --------------------------------------------------------------------------- CLI


def test_cli_replay_audit_and_counterfactual_on_an_export(
    recorded: RecordedLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_export(recorded, tmp_path, Topics())
    write_policy(three(), tmp_path)
    assert (policy := read_policy(tmp_path)) is not None
    assert policy.config_hash == three().config_hash  # replays without the providers file

    assert main(["replay", "--from-export", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mismatched"] == 0 and report["reproduced"] == report["decisions"] > 600

    assert (
        main(
            [
                "replay",
                "--from-export",
                str(tmp_path),
                "--set",
                "BANDIT_COST_WEIGHT=3",
                "--runs",
                "1",
            ]
        )
        == 0
    )
    assert "alternative (estimated)" in capsys.readouterr().out

    request_id = next(e.event.request_id for e in recorded.decisions if e.event)
    assert main(["audit", request_id, "--from-export", str(tmp_path), "--verify"]) == 0
    assert "replay: reproduced" in capsys.readouterr().out
    assert main(["audit", "no-such-request", "--from-export", str(tmp_path)]) == 1

    lines = (tmp_path / "routing.jsonl").read_text().splitlines()
    index = next(
        i
        for i, line in enumerate(lines)
        if '"attempt.finished"' in line and '"success"' in line and i > 20
    )
    row = json.loads(lines[index])
    row["event"]["outcome"]["latency_ms"] *= 7
    lines[index] = json.dumps(row)
    (tmp_path / "routing.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["replay", "--from-export", str(tmp_path)]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_cli_reports_bad_input_in_one_line(
    recorded: RecordedLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "--from-export", str(tmp_path / "missing")]) == 2
    assert "not a switchyard export" in capsys.readouterr().err
    write_export(recorded, tmp_path, Topics())
    write_policy(three(), tmp_path)
    assert main(["replay", "--from-export", str(tmp_path), "--set", "NOPE=1"]) == 2
    assert main(["replay", "--from-export", str(tmp_path), "--set", "BANDIT_COST_WEIGHT=x"]) == 2
    assert "BANDIT_COST_WEIGHT" in capsys.readouterr().err
