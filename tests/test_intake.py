"""The rule every input topic's agent follows (app/worker/intake.py), without a broker:
a record is sent on, or dead-lettered with its reason; only the broker's trouble raises."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from app.contract import DeadLetter, LogPosition
from app.ingest import dead_letter
from app.worker.intake import take_one

SOURCE = LogPosition(topic="llm.requests", partition=2, offset=7)
WHEN = datetime(2026, 12, 5, tzinfo=UTC)


def _run(validate: Any, forward: Any) -> tuple[Any, list[DeadLetter]]:
    rejected: list[DeadLetter] = []

    async def reject(letter: DeadLetter) -> str:
        rejected.append(letter)
        return "dead-lettered"

    result = asyncio.run(
        take_one(
            b'{"x": 1}',
            SOURCE,
            WHEN,
            validate=validate,
            forward=forward,
            reject=reject,
            deadletter_max_bytes=4,
            what="record",
        )
    )
    return result, rejected


async def _sent(valid: str) -> str:
    return f"sent {valid}"


def test_a_valid_record_is_sent_on() -> None:
    assert _run(lambda raw, source, when: "ok", _sent) == ("sent ok", [])


def test_an_invalid_record_is_dead_lettered_with_its_reason() -> None:
    letter = dead_letter("schema_violation", "no model", b"{}", SOURCE, WHEN, 4)
    result, rejected = _run(lambda raw, source, when: letter, _sent)
    assert result == "dead-lettered" and rejected == [letter]


def test_a_refusal_after_validation_is_dead_lettered() -> None:
    letter = dead_letter("oversized", "envelope too large", b"{}", SOURCE, WHEN, 4)

    async def refuse(valid: str) -> DeadLetter:
        return letter

    assert _run(lambda raw, source, when: "ok", refuse) == ("dead-lettered", [letter])


def test_an_unforeseen_error_is_an_internal_dead_letter_with_the_original_bytes() -> None:
    def broken(raw: bytes, source: LogPosition, when: datetime) -> str:
        raise RuntimeError("a bug")

    result, [letter] = _run(broken, _sent)
    assert result == "dead-lettered"
    assert (letter.reason, letter.detail, letter.source) == ("internal", "RuntimeError", SOURCE)
    assert letter.original_size == 8 and letter.original_truncated  # kept to 4 bytes


def test_a_record_the_producer_finds_too_large_is_oversized() -> None:
    async def too_large(valid: str) -> str:
        raise MessageSizeTooLargeError()

    _, [letter] = _run(lambda raw, source, when: "ok", too_large)
    assert letter.reason == "oversized"


def test_the_brokers_own_trouble_is_raised_so_the_record_is_read_again() -> None:
    async def down(valid: str) -> str:
        raise KafkaConnectionError()

    with pytest.raises(KafkaConnectionError):
        _run(lambda raw, source, when: "ok", down)
