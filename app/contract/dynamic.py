"""What a dynamic route decided for a request, as events carry it."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from app.contract.base import Frozen


class DynamicTrace(Frozen):
    """The graph a request walked, where it ended, and the fallback models left.

    Carried by the request on the routing log (a request forwarded to the route its
    model node names, or to a fallback model, walks no graph again) and copied into
    each of its decisions (the trace). Labels and node ids only: no request content.
    """

    graph: str
    #: ``app.routing.graph.Path.trace()``: nodes passed, exits, the terminal.
    path: dict[str, Any]
    #: The route or ``provider:model`` in use: the model node's, then each fallback's.
    target: str
    #: Fallback models not tried yet, in order (at most 8).
    fallbacks: list[str] = Field(default_factory=list)
    #: Attempts made before this target (a fallback's attempts number on from them).
    attempt_base: int = Field(default=0, ge=0)
    #: The route the request was forwarded from, if any.
    forwarded_from: str | None = None
    #: Budget nodes passed (``graph/node/subject``): their spend counts this request's.
    budget_nodes: list[str] = Field(default_factory=list)
