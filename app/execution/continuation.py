"""Mid-stream failover: a call that goes on with the answer a broken stream began.

When a provider's stream breaks after the client was given some of the answer (cut,
stalled, a malformed chunk), the request's retry carries that text
(``RequestAccepted.answered_prefix``) and the next attempt, on whatever deployment the
router chose, goes on from it, so the client's stream continues with no repeated and
no missing text (docs/flow.md):

* a deployment that takes an assistant prefill (``prefill: true``, and not learnt to
  refuse it) is sent the prefix as the last, assistant message and continues it; the
  answer recorded is the prefix and the continuation;
* one that does not (``prefill: false``, the default; or one that answered the
  prefill with a 400, called again at once in the same attempt without it) restarts
  the answer: nothing of it is
  published until it is known to begin with the prefix, then only what follows (and
  nothing, if it does not: the client's stream then ends with an error event, and the
  answer is still the record).

What a deployment was learnt to refuse is kept per worker process: it is how the
executor calls, not a routing decision (the outcome records what happened).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from app.config.providers import ProviderConfig
from app.contract import ChatMessage, ChatRequest, StatusClass, refusal_code
from app.execution.deltas import DeltaPublisher
from app.execution.outcome import CallResult

#: Make one streamed call of ``request`` within ``budget_s`` seconds.
StreamCall = Callable[[ChatRequest, float], Awaitable[CallResult]]

#: Deployments that answered a prefill with a 400 (this process learnt it).
_REFUSES_PREFILL: set[str] = set()


def prefilled(request: ChatRequest, prefix: str) -> ChatRequest:
    """The request with the answer's beginning as the last, assistant message."""
    prefill = ChatMessage(role="assistant", content=prefix)
    return request.model_copy(update={"messages": [*request.messages, prefill]})


async def stream_on(
    call: StreamCall,
    provider: ProviderConfig,
    deployment: str,
    request: ChatRequest,
    prefix: str,
    budget_s: float,
    sink: DeltaPublisher,
) -> CallResult:
    """Call so that the answer goes on after ``prefix`` (see the module's rules)."""
    started = time.monotonic()
    if provider.prefill and deployment not in _REFUSES_PREFILL:
        sink.continue_after(prefix)
        result = await call(prefilled(request, prefix), budget_s)
        if result.status_class is StatusClass.SUCCESS:
            return _prefixed(result, prefix)
        if not _refused_prefill(result, sink):
            return result
        _REFUSES_PREFILL.add(deployment)
        budget_s -= time.monotonic() - started
        if budget_s <= 0:
            return result
    sink.restart_after(prefix)
    return await call(request, budget_s)


def forget_learnt() -> None:
    """Forget which deployments refuse prefills (tests)."""
    _REFUSES_PREFILL.clear()


def _refused_prefill(result: CallResult, sink: DeltaPublisher) -> bool:
    """A 400 before any of the answer, that names no other refusal: the prefill's."""
    return (
        result.status_class is StatusClass.CLIENT_ERROR
        and result.http_status == 400
        and not sink.started
        and refusal_code(result.error) is None
    )


def _prefixed(result: CallResult, prefix: str) -> CallResult:
    """A continuation's answer as the whole answer: the prefix, then what it added."""
    completion: dict[str, Any] | None = result.completion
    if completion is None:
        return result
    choices = [dict(c) for c in completion.get("choices") or []]
    if choices:
        message = dict(choices[0].get("message") or {})
        content = message.get("content")
        message["content"] = prefix + (content if isinstance(content, str) else "")
        choices[0] = {**choices[0], "message": message}
    return replace(result, completion={**completion, "choices": choices})
