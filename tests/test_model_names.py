"""Models answer to their names: a bare model name that names one deployment (the
``model`` an answer reports) is a pin of it; a name several deployments share, or a
route's, is not; ``/v1/models`` lists those names with their deployment."""

from __future__ import annotations

from typing import Any

from factories import fold

from app.config.schema import parse_config
from app.contract import ChatRequest, DeadLetter, LogPosition, RequestAccepted
from app.ingest import accept
from app.routing.fold import at
from app.routing.params import RoutingParams
from app.routing.policy import Policy

CONFIG: dict[str, Any] = {
    "providers": [
        {"id": "a", "base_url": "https://a.test/v1", "models": [{"name": "big"}]},
        {"id": "b", "base_url": "https://b.test/v1", "models": [{"name": "small"}]},
        {"id": "c", "base_url": "https://c.test/v1", "models": [{"name": "small"}]},
        {"id": "d", "base_url": "https://d.test/v1", "models": [{"name": "chat"}]},
    ],
    "routes": {"chat": {"providers": ["a", "b", "c", "d"]}},
}
POLICY = Policy(parse_config(CONFIG, env={}), RoutingParams())


def request(request_id: str, model: str) -> RequestAccepted | DeadLetter:
    body = {
        "request_id": request_id,
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
    }
    raw = ChatRequest.model_validate(body).model_dump_json(exclude_none=True).encode()
    where = LogPosition(topic="llm.requests", partition=0, offset=0)
    config = POLICY.config
    return accept(raw, where, at(0.0), config, max_request_bytes=10**6, deadletter_max_bytes=64)


def test_a_bare_model_name_of_one_deployment_is_that_deployment() -> None:
    pinned = request("n1", "big")
    assert isinstance(pinned, RequestAccepted) and pinned.pinned == "a:big"
    (dispatch,) = fold([pinned], POLICY).dispatches
    assert dispatch.decision.deployment == "a:big"


def test_a_shared_name_or_a_routes_name_is_no_pin() -> None:
    letter = request("n2", "small")  # b:small and c:small
    assert isinstance(letter, DeadLetter) and letter.reason == "unknown_route"
    route = request("n3", "chat")  # the route, not d:chat
    assert isinstance(route, RequestAccepted) and route.pinned is None
    assert POLICY.config.named_models == {"big": "a:big"}
