"""Faust's and aiokafka's DEBUG lines about a send keep the topic and key, not the value."""

from __future__ import annotations

import logging

import pytest

from app import log_hygiene

PROMPT = b'{"messages": [{"role": "user", "content": "the prompt"}]}'


def test_send_lines_lose_their_value_and_keep_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    log_hygiene.install()
    log_hygiene.install()  # idempotent
    faust_topics = logging.getLogger("faust.topics")
    faust_driver = logging.getLogger("faust.transport.drivers.aiokafka")
    producer = logging.getLogger("aiokafka.producer.producer")
    assert sum(isinstance(f, log_hygiene.ContentRedactor) for f in faust_topics.filters) == 1
    template = "send: topic=%r k=%r v=%r timestamp=%r partition=%r"
    with caplog.at_level(logging.DEBUG):
        faust_topics.debug(template, "llm.requests", b"r-1", PROMPT, 1.0, 2)
        faust_driver.debug(template, "llm.requests", b"r-1", PROMPT, 1.0, 2)
        producer.debug("Sending (key=%s value=%s) to %s", b"r-1", PROMPT, "tp")
        producer.debug("unrelated %s", "line")
    text = caplog.text
    assert "the prompt" not in text
    assert text.count(f"<{len(PROMPT)} bytes redacted>") == 3
    assert "llm.requests" in text and "b'r-1'" in text and "unrelated line" in text
