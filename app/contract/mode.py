"""The routing modes: what a request, a route or a dynamic route's model node may ask to
optimise (their weights and rules: :mod:`app.understanding.modes`)."""

from __future__ import annotations

from enum import StrEnum


class RoutingMode(StrEnum):
    BALANCED = "balanced"
    PRICE = "price"
    LATENCY = "latency"
    QUALITY = "quality"
    THROUGHPUT = "throughput"
