"""Policy as events: versions on the routing log, folded, replayed, numbered."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import T0, accepted, dep, finish, params, provider, routing_config

from app.audit.log import RecordedLog, parse
from app.audit.replay import replay
from app.config.schema import ConfigError
from app.contract import RoutingLogEvent, derived_id
from app.contract.policy import PolicyChanged, PolicyDocument, PolicyProposed
from app.policy.document import document_from_file, with_local_keys
from app.policy.files import load_config
from app.policy.log import number_versions
from app.routing.answers import at
from app.routing.book import PolicyBook, document_hash, params_document, policy_from_document
from app.routing.driver import Driver, UnknownPolicyVersion
from app.routing.policy import Policy
from app.routing.rows import dumps, loads
from app.routing.state import RouteState

A, B = dep("alpha"), dep("beta")


def document(*provider_ids: str, **param_overrides: object) -> PolicyDocument:
    config = routing_config(*(provider(p) for p in provider_ids))
    view = config.model_dump(mode="json", exclude={"gateway_keys": True})
    return PolicyDocument(config=view, params=params_document(params(**param_overrides)))


def change(version: int, doc: PolicyDocument, route: str = "chat") -> PolicyChanged:
    return PolicyChanged(
        id=derived_id("policy.changed", version, route),
        occurred_at=at(T0),
        route=route,
        version=version,
        hash=document_hash(doc),
        document=doc,
        source="apply",
    )


def run(events: list[RoutingLogEvent], default: Policy) -> tuple[Driver, RecordedLog]:
    """Fold events as the live router does; record them and what it derived."""
    book = PolicyBook()
    for event in events:
        if isinstance(event, PolicyChanged):
            book.add(event.version, event.document, event.hash)
    driver = Driver(lambda: default, book=book)
    log = RecordedLog("test")
    for offset, event in enumerate(events):
        step = driver.fold(event, offset)
        log.routing.append(parse("routing", 0, offset, event.model_dump_json()))
        for dispatch in step.dispatches:
            raw = dispatch.decision.model_dump_json()
            log.decisions.append(parse("decisions", 0, len(log.decisions), raw))
        for response in step.responses:
            raw = response.model_dump_json()
            log.responses.append(parse("responses", 0, len(log.responses), raw))
    return driver, log


def traffic(first: int, count: int, t: float) -> list[RoutingLogEvent]:
    """Requests answered at once: each decision is taken with both deployments idle."""
    events: list[RoutingLogEvent] = []
    for n in range(first, first + count):
        events.append(accepted(f"r{n}", t + n))
        events.append(finish(f"r{n}", A if n % 2 else B, t + n + 0.5))
    return events


def decided(log: RecordedLog) -> list[tuple[str, str, int]]:
    return [
        (e.event.request_id, e.event.deployment, e.event.policy_version)
        for e in log.decisions
        if e.event is not None
    ]


def test_a_route_switches_at_the_change_and_replay_follows() -> None:
    both, beta_only = document("alpha", "beta"), document("beta")
    events = [change(1, both), *traffic(0, 10, T0), change(2, beta_only), *traffic(10, 10, T0)]
    # The finishes name whichever deployment the test chose: only the decisions matter.
    driver, log = run(events, default=Policy(routing_config(provider("gamma")), params()))
    rows = decided(log)
    assert {v for _, _, v in rows[:10]} == {1}
    assert {d for _, d, _ in rows[:10]} == {A, B}  # both were candidates under v1
    assert {(d, v) for _, d, v in rows[10:]} == {(B, 2)}  # alpha removed, from here on
    assert driver.state("chat").policy_version == 2
    # Replay with an unrelated default: every route uses the version in force.
    report = replay(log, Policy(routing_config(provider("gamma")), params()))
    assert report.ok and report.mismatched == 0 and report.reproduced == 20
    assert report.policy_versions.keys() == {1, 2}
    assert not report.config_differs


def test_removed_deployments_keep_their_history() -> None:
    events = [change(1, document("alpha", "beta")), *traffic(0, 6, T0)]
    events.append(change(2, document("beta")))
    driver, _ = run(events, default=Policy(routing_config(provider("gamma")), params()))
    arms = driver.state("chat").arms
    assert arms[A].pulls > 0 and arms[B].pulls > 0


def test_a_copy_of_a_change_changes_nothing() -> None:
    v1, v2 = document("alpha", "beta"), document("beta")
    events = [change(1, v1), change(2, v2), change(2, v2), change(1, v1), accepted("r0", T0)]
    driver, log = run(events, default=Policy(routing_config(provider("gamma")), params()))
    assert driver.state("chat").policy_version == 2
    assert decided(log) == [("r0", B, 2)]


def test_a_route_that_never_switched_uses_the_first_version() -> None:
    events: list[RoutingLogEvent] = [accepted("r0", T0), change(1, document("beta"), "other")]
    _, log = run(events, default=Policy(routing_config(provider("gamma")), params()))
    assert decided(log) == [("r0", B, 1)]


def test_a_version_the_book_lacks_is_an_error_not_a_guess() -> None:
    driver = Driver(lambda: Policy(routing_config(provider("beta")), params()))
    driver.book.add(1, document("beta"))
    driver.states["chat"] = RouteState(policy_version=3)
    with pytest.raises(UnknownPolicyVersion, match="version 3"):
        driver.fold(accepted("r0", T0), 0)


def test_the_version_round_trips_in_the_row_and_old_rows_read_as_none() -> None:
    state = RouteState(position=4, policy_version=7)
    assert loads(dumps(state)).policy_version == 7
    assert b"policy_version" not in dumps(RouteState(position=4))
    assert loads(dumps(RouteState(position=4))).policy_version == 0


def test_the_parameters_travel_with_the_document() -> None:
    doc = document("beta", strategy="thompson", cb_failure_threshold=9)
    policy = policy_from_document(doc, 4)
    assert policy.version == 4
    assert policy.params.strategy.value == "thompson"
    assert policy.params.cb_failure_threshold == 9


# --------------------------------------------------------------------------- numbering


def proposed(doc: PolicyDocument, n: int) -> PolicyProposed:
    return PolicyProposed(
        id=f"p{n}", occurred_at=at(T0 + n), hash=document_hash(doc), document=doc, source="apply"
    )


def test_versions_are_ranks_of_the_proposals_that_change_something() -> None:
    v1, v2 = document("alpha"), document("beta")
    records = [(0, proposed(v1, 0)), (1, proposed(v1, 1)), (2, proposed(v2, 2))]
    records += [(3, proposed(v1, 3))]
    versions = number_versions(records)
    assert [(v.number, v.offset) for v in versions] == [(1, 0), (2, 2), (3, 3)]
    # Going on from what is known gives the same numbers as reading it all again.
    assert number_versions(records[3:], versions[:2]) == versions


# --------------------------------------------------------------------------- the file


PROVIDERS = """
providers:
  - id: alpha
    base_url: ${ALPHA_URL}
    api_key: ${ALPHA_KEY}
    models: [{name: m1}]
  - id: beta
    base_url: http://127.0.0.1:9/v1
    api_key: sk-literal-SECRET-123
    models: [{name: m1}]
gateway_keys:
  - sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    tenant: acme
"""


def test_a_document_carries_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(PROVIDERS)
    monkeypatch.setenv("ALPHA_URL", "http://127.0.0.1:8/v1")
    monkeypatch.delenv("ALPHA_KEY", raising=False)  # keys need not be set where applied
    doc = document_from_file(path, params())
    text = doc.model_dump_json()
    assert "SECRET" not in text and "gateway_keys" not in text and "0000" not in text
    alpha, beta = doc.config["providers"]
    assert alpha["api_key"] == "${ALPHA_KEY}" and "api_key" not in beta
    assert alpha["base_url"] == "http://127.0.0.1:8/v1"  # fixed for every worker
    # A worker resolves the reference from its own environment; the literal key comes
    # from its own file.
    monkeypatch.setenv("ALPHA_KEY", "sk-from-env")
    policy = policy_from_document(doc, 1)
    local = load_config(path)
    keyed = with_local_keys(policy, local).provider_by_id
    assert keyed["alpha"].api_key.get_secret_value() == "sk-from-env"
    assert keyed["beta"].api_key.get_secret_value() == "sk-literal-SECRET-123"
    # The hash is the document's: the same whatever keys the environment holds.
    monkeypatch.setenv("ALPHA_KEY", "another")
    assert document_hash(document_from_file(path, params())) == document_hash(doc)


def test_an_invalid_file_is_one_error_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALPHA_URL", "http://127.0.0.1:8/v1")
    path = tmp_path / "providers.yaml"
    path.write_text(PROVIDERS.replace("base_url: http://127.0.0.1:9/v1", "base_url: nope"))
    with pytest.raises(ConfigError, match=r"providers\.1\.base_url"):
        document_from_file(path, params())


def test_a_missing_variable_outside_keys_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(PROVIDERS)
    monkeypatch.delenv("ALPHA_URL", raising=False)
    with pytest.raises(ConfigError, match="ALPHA_URL is not set"):
        document_from_file(path, params())


def test_a_change_stamped_by_a_clock_far_ahead_moves_no_route_clock() -> None:
    """An operator's laptop an hour ahead must not expire every request of the route."""
    ahead = change(1, document("beta")).model_copy(update={"occurred_at": at(T0 + 3600)})
    default = Policy(routing_config(provider("gamma")), params())
    driver, log = run([accepted("r0", T0), ahead, accepted("r1", T0 + 1)], default=default)
    assert driver.state("chat").clock == T0 + 1
    assert [d for d, _, _ in decided(log)] == ["r0", "r1"]
