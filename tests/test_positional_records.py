"""The fold builds its hottest records positionally (a keyword call costs twice as much):
their field order is part of that code, and must not move unnoticed."""

from __future__ import annotations

from dataclasses import fields

from app.routing.state import ArmState, Evidence, OpenAttempt, Recent, Sums

ORDER = {
    ArmState: "pulls total_reward alpha beta avg_latency_s latency_samples in_flight "
    "rate_limited retry_after_until breaker ewma_failure ewma_latency_ms ewma_p95_ms "
    "observations tokens_per_s throughput_samples recent evidence refused_tokens",
    Evidence: "answers graded weight score square wins costed cost_usd tokens_in tokens_out",
    Sums: "calls failures answers reward latency_s",
    Recent: "at slow fast",
    OpenAttempt: "deployment decided_at deadline budget_nodes affinity cache",
}


def test_fields_of_positionally_built_records_keep_their_order() -> None:
    for cls, names in ORDER.items():
        assert [f.name for f in fields(cls)] == names.split(), cls.__name__
