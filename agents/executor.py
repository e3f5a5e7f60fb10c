"""Executor: call the chosen provider, publish the outcome, feed it back, and publish the
answer when it is a successful final one (the router answers every error).

:func:`run_dispatch` makes one attempt's call. The worker that decided starts it
at once (agents/handoff.py: no broker hop between a decision and its call); the
request's successful answer is published here, by the process that received it,
as the same record the router's fold derives (the feedback says so, and the
router does not send it again). One pooled HTTP client per process, closed when
the worker shuts down.

A ``stream: true`` request's call streams from the provider and publishes the answer's
pieces as ``response.delta`` events while they come (app/execution/deltas.py, the rule in
docs/gateway.md): a failed stream's end marker before the attempt's feedback, a
successful one's once the answer is on ``llm.responses``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import SecretStr

from agents import exactly_once, replies
from agents.app import (
    app,
    outcomes_topic,
    responses_topic,
    routing_log,
    settings,
)
from agents.judge import read_judgement, request_judgement
from app import metrics
from app.config.providers import ModelSpec, ProviderConfig
from app.config.schema import Credential, Guardrails, RoutingConfig
from app.contract import (
    REGION_NOT_SERVED,
    ChatRequest,
    Dispatch,
    Outcome,
    StatusClass,
    StreamDelta,
    refusal_code,
)
from app.credentials import FALLBACK_ON, CredentialError, credential_for, open_sealed
from app.execution.call import CallResult, call_provider
from app.execution.continuation import stream_on
from app.execution.deltas import DeltaPublisher
from app.execution.envelope import Sealed, seal
from app.execution.guarded import guard_answer
from app.execution.http import make_client
from app.execution.outcome import blame_deadline, call_budget_s, deadline_passed
from app.execution.stream import stream_provider
from app.guardrails import Rules, StreamScreen, redact_messages, rules_for
from app.policy.holder import policy_holder
from app.routing.fold import LOST_ATTEMPT_GRACE_S
from app.telemetry import spans

log = logging.getLogger(__name__)
_client: httpx.AsyncClient | None = None


def shared_client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = make_client(
            max_connections=settings.http_max_connections,
            keepalive_expiry_s=settings.http_keepalive_expiry_s,
        )
    return _client


@app.on_before_shutdown.connect  # type: ignore[arg-type]  # faust's stub lacks async receivers
async def _close_client(sender: Any, *args: Any, **kwargs: Any) -> None:
    global _client
    if _client is not None:
        await _client.aclose()
        _client = None


def too_late(dispatch: Dispatch, now: float) -> bool:
    """Past the deadline by half the router's grace: no call, at once ``expired``.

    A dispatch read this late (a backlog after a crash or an outage, an overloaded
    worker) is answered by the router anyway; reporting it ``expired`` at once closes
    the attempt without waiting for the router's lost-attempt expiry, and counts for
    nothing against the provider (if the router expired it first, the outcome is
    ignored: its attempt is no longer open).
    """
    return now > dispatch.deadline + LOST_ATTEMPT_GRACE_S / 2


class CallTakenBack(Exception):
    """A call made ahead of its fold that the fold did not decide (app/router/ahead.py):
    nothing of it is published."""


async def run_dispatch(
    dispatch: Dispatch, partition: int | None = None, claimed: Awaitable[bool] | None = None
) -> None:
    """Call, publish the outcome and the feedback (and the answer when it is a successful
    final one).

    ``partition`` (exactly-once): the routing partition whose transaction writes them;
    :class:`app.worker.transactions.NotCommitted` when it could not (no answer is sent then).
    ``claimed``: a call ahead of its fold publishes nothing before this is True;
    :class:`CallTakenBack` when it is False.
    """
    provider = _provider_of(dispatch)
    rules = _output_rules(dispatch)
    sink = None if provider is None else _delta_publisher(dispatch, provider, rules)
    try:
        if too_late(dispatch, time.time()):
            result = deadline_passed()
        elif provider is None:
            # Decided under a config that had this provider; the one in force has not.
            result = CallResult(
                StatusClass.CONNECTION_ERROR, None, 0.0, error="provider no longer configured"
            )
        else:
            own, sent = _credential(dispatch, provider), _sent_request(dispatch)
            result = guard_answer(await _call_in_time(dispatch, provider, sink, own, sent), rules)
        if claimed is not None and not await claimed:
            raise CallTakenBack(dispatch.id)
        if provider is None:
            provider = _removed_provider(dispatch.decision.provider)
        sealed = _seal(dispatch, result, provider)
        await _end_stream(sink, sealed, before_publish=True)
        await _publish(sealed, partition)
        await _end_stream(sink, sealed, before_publish=False)
    finally:
        if sink is not None:
            sink.abandon()  # a cancelled call ends without an end marker
    replies.send_response(sealed.response, dispatch.accepted.request.reply_to)  # the gateway's
    await request_judgement(dispatch, sealed.response)  # the route's judge, when it samples
    if sealed.response is not None:
        await read_judgement(sealed.response)  # the grade, when this answers a judge request


def _streams(dispatch: Dispatch, provider: ProviderConfig) -> bool:
    """Whether the call streams: the provider is set to, or the request asks (not a
    local-first call, which needs the whole answer's log-probabilities, nor an embeddings
    request: its answer is one body)."""
    request = dispatch.accepted.request
    wanted = provider.stream or request.stream is True
    return wanted and dispatch.min_confidence is None and not request.is_embeddings


def _config_of(dispatch: Dispatch) -> RoutingConfig:
    """The config of the decision's policy version (else the newest)."""
    holder = policy_holder()
    return (holder.version(dispatch.decision.policy_version) or holder.current).config


def _guardrails(dispatch: Dispatch) -> Guardrails:
    return _config_of(dispatch).guardrails


def _output_rules(dispatch: Dispatch) -> Rules:
    """The output rules for the decision's route and the request's tenant."""
    rules = _guardrails(dispatch).output
    return rules_for(rules, dispatch.decision.route, dispatch.accepted.request.tenant)


def _sent_request(dispatch: Dispatch) -> ChatRequest:
    """The request as the provider is sent it: its messages redacted by the input rules."""
    request = dispatch.accepted.request
    rules = rules_for(_guardrails(dispatch).input, dispatch.decision.route, request.tenant)
    return redact_messages(request, rules)


def _delta_publisher(
    dispatch: Dispatch, provider: ProviderConfig, rules: Rules
) -> DeltaPublisher | None:
    """The publisher of a ``stream: true`` request's deltas (None for any other call)."""
    request = dispatch.accepted.request
    if request.stream is not True or not _streams(dispatch, provider):
        return None

    async def send(delta: StreamDelta) -> Awaitable[Any]:
        return await replies.send_delta(delta, request.reply_to)

    screen = StreamScreen(rules) if rules else None
    return DeltaPublisher(dispatch, send, settings.stream_flush_interval_s, screen)


async def _end_stream(sink: DeltaPublisher | None, sealed: Sealed, *, before_publish: bool) -> None:
    """A failed stream ends before the feedback (a retry's deltas come after it), a
    successful one once the answer is published."""
    if sink is None or (sealed.response is None) != before_publish:
        return
    outcome = sealed.outcome
    if sealed.response is None:
        error = f"{outcome.status_class.value}: {outcome.error or 'failed'}"
        await sink.finish("failed", error=error)
        return
    usage = (sealed.response.completion or {}).get("usage")
    usage = usage if isinstance(usage, dict) else None
    await sink.finish("ok", finish_reason=outcome.finish_reason, usage=usage)


def _provider_of(dispatch: Dispatch) -> ProviderConfig | None:
    """The decision's provider as its policy version configured it, else as the newest
    does (None: no longer configured)."""
    decision = dispatch.decision
    return policy_holder().provider(decision.provider, decision.policy_version)


def _seal(dispatch: Dispatch, result: CallResult, provider: ProviderConfig) -> Sealed:
    sealed = seal(
        dispatch,
        result,
        provider,
        occurred_at=datetime.now(UTC),
        max_record_bytes=settings.max_record_bytes,
    )
    _observe(sealed.outcome)
    return sealed


async def _call_in_time(
    dispatch: Dispatch,
    provider: ProviderConfig,
    sink: DeltaPublisher | None = None,
    own: Credential | None = None,
    sent: ChatRequest | None = None,
) -> CallResult:
    """Wait out the retry backoff, then call within both the provider timeout and the deadline.

    Running out of the request's time is ``expired``, not the provider's ``timeout``: the
    deadline passed before the call, or the call was cut short by it (the time left was
    less than the provider's timeout, and the call used all of it): deadlines and blame,
    docs/design.md#robustness.
    """
    backoff = dispatch.not_before - time.time()
    if backoff > 0:
        await asyncio.sleep(backoff)
    left = dispatch.deadline - time.time()
    if left <= 0:
        return deadline_passed()
    budget = call_budget_s(dispatch.timeout_s, left)
    with spans.provider_call(dispatch, provider.base_url, _streams(dispatch, provider)) as call:
        result = await _call_keyed(dispatch, provider, budget, sink, own, sent)
        result = blame_deadline(result, timeout_s=dispatch.timeout_s, left_s=left)
        call.ended(result)  # the call's span, when tracing (app/telemetry/spans.py)
    if sink is not None and sink.started and result.status_class is not StatusClass.SUCCESS:
        # The client has this much of the answer: the next attempt goes on from it.
        result = replace(result, partial=sink.published_text or None)
    return result


def _credential(dispatch: Dispatch, provider: ProviderConfig) -> Credential | None:
    """The credential the request's gateway key or tenant brought for this provider."""
    request = dispatch.accepted.request
    return credential_for(_config_of(dispatch), request.tenant, request.key_name, provider.id)


async def _call_keyed(
    dispatch: Dispatch,
    provider: ProviderConfig,
    budget: float,
    sink: DeltaPublisher | None,
    own: Credential | None,
    sent: ChatRequest | None,
) -> CallResult:
    """The call with the key the request's gateway key or tenant brought for this provider,
    when one did (app/credentials/); with ``fallback: managed`` the deployment's own key
    takes over in the same attempt when the own key is refused or rate limited (and no
    text was streamed yet). The outcome names the credential and whose key answered."""
    if own is None:
        return await _call(dispatch, provider, budget, sink, sent)
    started = time.monotonic()
    try:
        master = settings.credentials_key
        secret = open_sealed(own.sealed, master.get_secret_value() if master else None)
    except CredentialError as exc:
        error = f"credential {own.id!r}: {exc}"
        result = CallResult(StatusClass.AUTH_ERROR, None, 0.0, error=error)
    else:
        keyed = provider.model_copy(update={"api_key": SecretStr(secret)})
        result = await _call(dispatch, keyed, budget, sink, sent)
    streamed = sink is not None and sink.started
    if own.fallback == "managed" and result.status_class in FALLBACK_ON and not streamed:
        left = budget - (time.monotonic() - started)
        if left > 0:
            managed = await _call(dispatch, provider, left, sink, sent)
            return replace(managed, credential=own.id, key_source="managed")
    return replace(result, credential=own.id, key_source="own")


async def _call(
    dispatch: Dispatch,
    provider: ProviderConfig,
    budget: float,
    sink: DeltaPublisher | None,
    sent: ChatRequest | None = None,
) -> CallResult:
    """One call of the request as it is sent (``sent``: redacted by the input rules;
    default: as accepted)."""
    decision = dispatch.decision
    request = sent or dispatch.accepted.request
    if _streams(dispatch, provider):

        async def stream(asked: ChatRequest, within_s: float) -> CallResult:
            return await stream_provider(
                shared_client(), provider, decision.model, asked, within_s, sink
            )

        prefix = dispatch.accepted.answered_prefix
        if prefix and sink is not None:  # a broken stream's answer, to go on with
            return await stream_on(
                stream, provider, decision.deployment, request, prefix, budget, sink
            )
        return await stream(request, budget)
    return await call_provider(
        shared_client(),
        provider,
        decision.model,
        request,
        budget,
        logprobs=dispatch.min_confidence is not None,
    )


async def _publish(sealed: Sealed, partition: int | None = None) -> None:
    """The answer when this is it, the outcome for analysts, and the feedback the router
    folds (and answers failures from); in one transaction of the routing partition's
    when it is given (exactly-once)."""
    outcome = sealed.outcome
    key = outcome.request_id.encode()
    if partition is not None:
        await _commit(sealed, partition)
        return
    answer = None
    if sealed.response is not None:
        answer = await responses_topic.send(key=key, value=sealed.response.model_dump_json())
        metrics.RESPONSES.labels(status="ok", source="executor").inc()
    await outcomes_topic.send(key=key, value=outcome.model_dump_json())
    delivered = await routing_log.send(key=outcome.route.encode(), value=sealed.feedback)
    # The call counts as done (its hand-off record acked) only once the broker has the
    # feedback: a stop in between must leave the dispatch to be made again. The answer is
    # acked too, before a stream's end marker tells a gateway the answer is complete.
    await delivered
    if answer is not None:
        await answer


async def _commit(sealed: Sealed, partition: int) -> None:
    writer = await exactly_once.call_writers.get(partition)
    outcome = sealed.outcome
    key = outcome.request_id.encode()
    written = []
    if sealed.response is not None:
        value = sealed.response.model_dump_json()
        written.append(writer.send(responses_topic.name, key, value))
    written.append(writer.send(outcomes_topic.name, key, outcome.model_dump_json()))
    written.append(writer.send(routing_log.name, outcome.route.encode(), sealed.feedback))
    await writer.commit()
    for record in written:
        await record  # NotCommitted when a stop or a fence took the transaction
    if sealed.response is not None:
        metrics.RESPONSES.labels(status="ok", source="executor").inc()


def _removed_provider(provider_id: str) -> ProviderConfig:
    return ProviderConfig(id=provider_id, base_url="http://0.0.0.0", models=[ModelSpec(name="-")])


def _observe(outcome: Outcome) -> None:
    provider = outcome.provider
    metrics.OUTCOMES.labels(provider=provider, status_class=outcome.status_class.value).inc()
    if refusal_code(outcome.error) == REGION_NOT_SERVED:
        metrics.REGION_REFUSALS.labels(provider=provider).inc()
    metrics.PROVIDER_LATENCY.labels(provider=provider).observe(outcome.latency_ms / 1000.0)
    metrics.TOKENS.labels(provider=provider, kind="input").inc(outcome.tokens_in)
    metrics.TOKENS.labels(provider=provider, kind="output").inc(outcome.tokens_out)
    metrics.TOKENS.labels(provider=provider, kind="cached").inc(outcome.tokens_cached)
    metrics.COST_USD.labels(provider=provider).inc(outcome.cost_usd)
