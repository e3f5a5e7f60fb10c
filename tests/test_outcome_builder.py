"""One outcome builder: the simulator's attempts end exactly as the executor's would."""

from __future__ import annotations

from collections import Counter

from app.contract import AttemptFinished, Dispatch, StatusClass
from app.execution.envelope import seal
from app.execution.outcome import (
    CallResult,
    blame_deadline,
    call_budget_s,
    recorded_result,
)
from app.routing.driver import Driver
from app.routing.policy import Policy
from bench.sim import scenarios
from bench.sim.engine import simulate
from bench.sim.policies import params_of

#: A deadline shorter than the providers' timeouts: some calls are cut by it, some
#: retries start after it.
POLICY = "ucb1+SWITCHYARD_REQUEST_DEADLINE_S=1.2"


def test_the_simulators_feedback_is_the_executors_for_the_same_call() -> None:
    scenario = scenarios.build("S3")  # a 429 storm: retries and Retry-After
    run = simulate(scenario, POLICY, 400, seed=3, record_log=True)
    assert run.log is not None
    policy = Policy(scenario.config, params_of(POLICY))
    driver = Driver(lambda: policy)
    dispatches: dict[tuple[str, int], Dispatch] = {}
    seen: Counter[str] = Counter()
    for position, event in enumerate(run.log):
        if isinstance(event, AttemptFinished):
            o = event.outcome
            sent = dispatches[(o.request_id, o.attempt)]
            provider = policy.config.provider_by_id[o.provider]
            sealed = seal(
                sent,
                recorded_result(o),
                provider,
                occurred_at=o.occurred_at,
                max_record_bytes=10**6,
            )
            executors = AttemptFinished.model_validate_json(sealed.feedback)
            rejected = o.status_class is StatusClass.SUCCESS and o.reward == 0.0
            if rejected:  # the simulated user's verdict is the one thing the executor lacks
                executors = executors.model_copy(
                    update={"outcome": executors.outcome.model_copy(update={"reward": 0.0})}
                )
            assert event == executors
            seen[o.status_class.value] += 1
            seen["retry"] += event.retry is not None
            seen["rejected"] += rejected
            seen["context"] += o.context is not None
        for dispatch in driver.fold(event, position).dispatches:
            dispatches[(dispatch.decision.request_id, dispatch.decision.attempt)] = dispatch
    # The comparison covered every kind of ending the simulation produces.
    for kind in ("success", "rate_limited", "expired", "retry", "rejected", "context"):
        assert seen[kind] > 0, seen


def test_the_deadline_cuts_a_call_in_the_simulator_as_in_the_executor() -> None:
    scenario = scenarios.build("S3")
    run = simulate(scenario, POLICY, 400, seed=3, record_log=True)
    assert run.log is not None
    timeouts = {p.timeout_ms for p in scenario.config.providers}
    outcomes = [e.outcome for e in run.log if isinstance(e, AttemptFinished)]
    expired = [o for o in outcomes if o.status_class is StatusClass.EXPIRED]
    assert expired
    assert all(o.reward == 0.0 and not o.retriable for o in expired)
    # A timeout is only ever the provider's own, after its whole timeout.
    for o in outcomes:
        if o.status_class is StatusClass.TIMEOUT:
            assert o.latency_ms in timeouts


def test_blame_deadline() -> None:
    timed_out = CallResult(StatusClass.TIMEOUT, None, 400.0, error="timeout after 0.4s")
    assert call_budget_s(30.0, 0.4) == 0.4
    cut = blame_deadline(timed_out, timeout_s=30.0, left_s=0.4)
    assert cut.status_class is StatusClass.EXPIRED
    assert blame_deadline(timed_out, timeout_s=0.4, left_s=30.0) == timed_out
    answered = CallResult(StatusClass.SERVER_ERROR, 503, 10.0)
    assert blame_deadline(answered, timeout_s=30.0, left_s=0.4) == answered
