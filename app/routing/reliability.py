"""The reliability accounting: what each kind of result means for a deployment.

One table, used by the executor (retriable or not) and the router (breaker and
rate-limit bookkeeping).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.contract import CONTEXT_LENGTH_EXCEEDED, REGION_NOT_SERVED, ROUTE_NOT_ALLOWED, StatusClass


class Availability(StrEnum):
    UP = "up"  # counts as a success for the breaker
    DOWN = "down"  # counts against availability (breaker failure)
    NEUTRAL = "neutral"  # says nothing about the provider's health


@dataclass(frozen=True, slots=True)
class Accounting:
    availability: Availability
    retriable: bool


ACCOUNTING: dict[StatusClass, Accounting] = {
    StatusClass.SUCCESS: Accounting(Availability.UP, retriable=False),
    # 401, 402, 404: they count against availability, but a client error
    # does not change model, so they are not retried elsewhere.
    StatusClass.AUTH_ERROR: Accounting(Availability.DOWN, retriable=False),
    # 400, 403, 413, 422 and other 4xx: the request's fault, returned at once.
    StatusClass.CLIENT_ERROR: Accounting(Availability.NEUTRAL, retriable=False),
    # 429: tracked on its own, never marks the provider unhealthy.
    StatusClass.RATE_LIMITED: Accounting(Availability.NEUTRAL, retriable=True),
    StatusClass.SERVER_ERROR: Accounting(Availability.DOWN, retriable=True),
    StatusClass.TIMEOUT: Accounting(Availability.DOWN, retriable=True),
    StatusClass.CONNECTION_ERROR: Accounting(Availability.DOWN, retriable=True),
    # A 2xx whose body is not a usable completion (malformed, cut, error finish reason).
    StatusClass.BAD_RESPONSE: Accounting(Availability.DOWN, retriable=True),
    # The request ran out of time (backlog, worker down): says nothing of the provider,
    # and nothing can be retried past the deadline.
    StatusClass.EXPIRED: Accounting(Availability.NEUTRAL, retriable=False),
}

AUTH_STATUSES = frozenset({401, 402, 404})
#: The retriable 5xx, plus 529 (Anthropic's "overloaded", a 503 by another name).
RETRIABLE_SERVER_STATUSES = frozenset({500, 502, 503, 504, 529})


def classify_http_status(status: int) -> StatusClass:
    """The class of a non-2xx HTTP status."""
    if status < 400:
        # 1xx/3xx: redirects are not followed, so the deployment's URL is wrong.
        return StatusClass.BAD_RESPONSE
    if status == 429:
        return StatusClass.RATE_LIMITED
    if status == 408:
        return StatusClass.TIMEOUT
    if status in AUTH_STATUSES:
        return StatusClass.AUTH_ERROR
    if status >= 500:
        return StatusClass.SERVER_ERROR
    return StatusClass.CLIENT_ERROR


def is_retriable(status_class: StatusClass, http_status: int | None) -> bool:
    """Fall back after 429, 500, 502, 503, 504, timeouts and connection errors."""
    if status_class is StatusClass.SERVER_ERROR:
        return http_status in RETRIABLE_SERVER_STATUSES
    return ACCOUNTING[status_class].retriable


#: The classes an error response's ``type`` names when a provider's result ended it.
PROVIDER_RESULT_TYPES = frozenset(status.value for status in StatusClass)


#: Error codes that say this model cannot serve the request, where another may: its
#: context window, its provider's regions, its capabilities, the request's data and
#: price rules, its tenant's and its own provider lists, the routes its gateway key may
#: use.
MODEL_MISMATCHES = frozenset(
    {
        CONTEXT_LENGTH_EXCEEDED,
        REGION_NOT_SERVED,
        "no_capable_deployment",
        "no_deployment_allowed",
        "deployment_not_allowed",
        ROUTE_NOT_ALLOWED,
    }
)


def moves_on(error_type: str, http_status: int | None, code: str | None = None) -> bool:
    """Whether an error answer is a failure another model may rescue: every retriable
    result (429, the retriable 5xx, timeouts, connection errors, broken or cut
    streams, with or without an HTTP status), a route that had no deployment left to
    try (503), or a model that cannot serve the request (its context window, its
    capabilities, the request's data and price rules, the provider lists). Another
    client error, a content-policy refusal or a passed deadline is not."""
    if code in MODEL_MISMATCHES:
        return True
    if error_type in PROVIDER_RESULT_TYPES:
        return is_retriable(StatusClass(error_type), http_status)
    return error_type == NO_DEPLOYMENT_AVAILABLE


#: Failures a retry on the same deployment may mend (after the backoff, or its
#: Retry-After): it answered, or dropped the connection. A timeout is not among them: a
#: silent deployment is not asked again before another candidate has been.
MENDABLE = frozenset(
    {
        StatusClass.RATE_LIMITED,
        StatusClass.SERVER_ERROR,
        StatusClass.CONNECTION_ERROR,
        StatusClass.BAD_RESPONSE,
    }
)


def mendable(status_class: StatusClass, http_status: int | None) -> bool:
    """Whether the same deployment may be tried again after this failure."""
    return status_class in MENDABLE and is_retriable(status_class, http_status)


#: The error type of an attempt no deployment of its route could take.
NO_DEPLOYMENT_AVAILABLE = "no_deployment_available"


def ends_request(
    attempt: int,
    max_attempts: int,
    status_class: StatusClass,
    http_status: int | None,
    *,
    confidence: float | None = None,
    min_confidence: float | None = None,
) -> bool:
    """Whether this attempt's result is the request's last: true unless it failed in a
    retriable way, or was a local-first attempt (``min_confidence`` set) that did not give
    a confident answer, and attempts remain.

    A local-first attempt that failed in any way hands the request on, a client error
    included: the local model refuses what the cloud takes (a prompt beyond its context
    window is a 400 from llama.cpp's server). The one rule the executor, the replay
    tools and the simulator share.
    """
    if attempt >= max_attempts:
        return True
    if min_confidence is not None:
        if status_class is not StatusClass.SUCCESS:
            return False
        return confidence is not None and confidence >= min_confidence
    return not is_retriable(status_class, http_status)
