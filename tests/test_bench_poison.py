"""``switchyard bench poison``'s pure parts: its records and what it counts."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from itertools import pairwise
from types import SimpleNamespace

from app.config.schema import parse_config
from app.contract import DeadLetter, LogPosition, RequestAccepted
from app.ingest import accept
from bench.poison import Record, measure, schedule
from bench.poison_records import KINDS

CONFIG = parse_config(
    {"providers": [{"id": "p", "base_url": "http://p.test/v1", "models": [{"name": "m"}]}]}, env={}
)


def test_the_schedule_holds_every_kind_and_the_valid_ones_evenly() -> None:
    records = schedule(1000, rate=500.0, seed=1)
    kinds = Counter(r.kind for r in records)
    assert kinds.pop("valid") == 1000
    assert sum(kinds.values()) >= 10_000
    assert set(kinds) == {k.name for k in KINDS}
    spots = [i for i, r in enumerate(records) if r.kind == "valid"]
    gaps = {b - a for a, b in pairwise(spots)}
    assert max(gaps) - min(gaps) <= 1
    assert sum(len(r.value) > 999_000 for r in records if r.kind == "valid") == 3
    assert len({r.request_id for r in records if r.kind == "valid"}) == 1000


def test_each_record_gets_the_reason_the_bench_expects() -> None:
    where = LogPosition(topic="llm.requests", partition=0, offset=0)
    now = datetime.now(UTC)
    for record in schedule(200, rate=500.0, seed=2)[::7]:
        result = accept(
            record.value, where, now, CONFIG, max_request_bytes=10**6, deadletter_max_bytes=64
        )
        if record.kind == "valid":
            assert isinstance(result, RequestAccepted)
        else:
            assert isinstance(result, DeadLetter) and result.reason == record.reason, record.kind


def test_measure_counts_dead_letters_by_position_and_latency_by_id() -> None:
    bad = Record(0.0, "not JSON", "not_json", "", b"{")
    wrong = Record(0.0, "lone surrogates", "bad_text", "", b"x")
    lost = Record(0.0, "not JSON", "not_json", "", b"y")
    good = Record(0.0, "valid", "", "v1", b"{}")
    sent = [
        (bad, SimpleNamespace(partition=0, offset=1), 10.0),
        (wrong, SimpleNamespace(partition=1, offset=1), 10.0),
        (lost, SimpleNamespace(partition=2, offset=1), 10.0),
        (good, SimpleNamespace(partition=0, offset=2), 10.0),
    ]
    letters = [
        {"source": {"partition": 0, "offset": 1}, "reason": "not_json"},
        {"source": {"partition": 1, "offset": 1}, "reason": "not_json"},
    ]
    responses = [{"request_id": "v1", "status": "ok", "_ts": 10.25}]
    result = measure(sent, responses, letters)
    assert (result["malformed"], result["dead_lettered"], result["expected_reason"]) == (3, 2, 1)
    assert (result["valid"], result["valid_ok"]) == (1, 1)
    assert result["p50_ms"] == 250.0
