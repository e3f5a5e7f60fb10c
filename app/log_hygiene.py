"""No record content in the worker's log, whatever its level (docs/design.md#robustness).

At DEBUG, Faust logs every record it sends with its value (``send: topic=... v=...``),
and so does aiokafka's producer (``Sending (key=... value=...)``): each request's
prompt and each completion would land in the log. :func:`install` puts a filter on
those loggers that replaces the value with its size, and keeps the rest of the line
(topic, key, partition: enough to follow a record through the log).

Logger filters outlive Faust's logging set-up (``dictConfig`` with existing loggers
kept), so installing before the worker starts is enough.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

#: logger name -> {message template: index of the argument that carries record content}.
CONTENT_ARGS: Mapping[str, Mapping[str, int]] = {
    "faust.topics": {"send: topic=%r k=%r v=%r timestamp=%r partition=%r": 2},
    "faust.transport.drivers.aiokafka": {
        "send: topic=%r k=%r v=%r timestamp=%r partition=%r": 2,
    },
    "aiokafka.producer.producer": {"Sending (key=%s value=%s) to %s": 1},
}


def redacted(value: object) -> str:
    if isinstance(value, bytes | bytearray | str):
        return f"<{len(value)} bytes redacted>"
    return "<redacted>"


class ContentRedactor(logging.Filter):
    """Replaces the content argument of known content-carrying messages; lets all through."""

    def __init__(self, templates: Mapping[str, int]) -> None:
        super().__init__()
        self.templates = templates

    def filter(self, record: logging.LogRecord) -> bool:
        index = self.templates.get(record.msg) if isinstance(record.msg, str) else None
        args = record.args
        if index is not None and isinstance(args, tuple) and index < len(args):
            record.args = (*args[:index], redacted(args[index]), *args[index + 1 :])
        return True


def install() -> None:
    """Idempotent: one redactor per logger."""
    for name, templates in CONTENT_ARGS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, ContentRedactor) for f in logger.filters):
            logger.addFilter(ContentRedactor(templates))
