"""A provider that refuses a request for the region it came from (a 403
``unsupported_country_region_territory``): the request's doing, not a failure of the
provider's; another deployment may serve it."""

from __future__ import annotations

import httpx

from app.contract import REGION_NOT_SERVED, StatusClass, refusal_code
from app.execution.call import classify_response
from app.execution.outcome import retriable
from app.routing.reliability import ACCOUNTING, Availability, moves_on

OPENAI_GEO_403 = {
    "error": {
        "code": "unsupported_country_region_territory",
        "message": "Country, region, or territory not supported",
        "param": None,
        "type": "request_forbidden",
    }
}


def test_a_geo_403_is_a_region_refusal_another_deployment_may_take() -> None:
    result = classify_response(httpx.Response(403, json=OPENAI_GEO_403), 12.0)
    assert result.status_class is StatusClass.CLIENT_ERROR
    assert refusal_code(result.error) == REGION_NOT_SERVED
    assert retriable(result)
    assert moves_on(result.status_class.value, 403, REGION_NOT_SERVED)
    # Neutral for the provider's health: no pull, no breaker failure.
    assert ACCOUNTING[result.status_class].availability is Availability.NEUTRAL


def test_a_region_refusal_is_recognised_by_its_message_too() -> None:
    body = {"error": {"message": "This service is not available in your region."}}
    result = classify_response(httpx.Response(403, json=body), 5.0)
    assert refusal_code(result.error) == REGION_NOT_SERVED


def test_another_403_is_not_one() -> None:
    body = {"error": {"message": "Your organization is not allowed to use this model."}}
    result = classify_response(httpx.Response(403, json=body), 5.0)
    assert result.status_class is StatusClass.CLIENT_ERROR
    assert refusal_code(result.error) is None
    assert not retriable(result)
