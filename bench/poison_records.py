"""The records of ``switchyard bench poison``: every kind of malformed input, and valid ones.

Each malformed kind comes with the dead-letter reason ingest must give it. Every
record that has text carries ``MARKER``, so the bench can check that no log line
quotes a record. Deterministic: record ``i`` of a kind is always the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

MARKER = "POISON-MARKER-7f3a"
LONE = '"\\ud800 ' + MARKER + '"'  # a JSON string holding a lone UTF-16 surrogate
USER = '[{"role": "user", "content": "' + MARKER + '"}]'


def _request(request_id: str, *, messages: str = USER, **extra: str) -> bytes:
    fields = "".join(f', "{name}": {value}' for name, value in extra.items())
    return f'{{"request_id": "{request_id}", "messages": {messages}{fields}}}'.encode()


def _not_json(i: int) -> bytes:
    variants = [
        _request(f"p{i}")[:-7],  # cut short
        b"\xff\xfe\x00" + MARKER.encode(),  # not UTF-8
        f"{MARKER} is not JSON".encode(),
        b"",
        _request(f"p{i}") + b"{}",  # trailing data
        b"{\"request_id\": 'single quotes'}",
    ]
    return variants[i % len(variants)]


def _not_object(i: int) -> bytes:
    variants = [f'["{MARKER}"]', f'"{MARKER}"', "42", "null", "true", "[]"]
    return variants[i % len(variants)].encode()


def _schema(i: int) -> bytes:
    variants = [
        f'{{"request_id": "p{i}", "prompt": "{MARKER}"}}',
        _request("").decode(),
        _request(f"p{i}", messages="[]").decode(),
        _request(f"p{i}", messages=f'"{MARKER}"').decode(),
        _request(f"p{i}", messages=f'[{{"role": "robot", "content": "{MARKER}"}}]').decode(),
        _request(f"p{i}", max_tokens="0").decode(),
        _request(f"p{i}", temperature="9").decode(),
        _request(f"p{i}", metadata='{"team": 7}').decode(),
    ]
    return variants[i % len(variants)].encode()


def _unknown_route(i: int) -> bytes:
    return _request(f"p{i}", model=f'"no-such-route-{i}"')


def _oversized(i: int) -> bytes:
    return _request(f"p{i}", messages=f'[{{"role": "user", "content": "{"x" * 1_100_000}"}}]')


def _deep(i: int) -> bytes:
    levels = 10_000 if i % 2 == 0 else 65
    return _request(f"p{i}", extra="[" * levels + "]" * levels)


def _number(i: int) -> bytes:
    variants = [
        _request(f"p{i}", extra="9" * 5000),  # past Python's 4,300-digit limit
        _request(f"p{i}", max_tokens="1" * 101),
        _request(f"p{i}", temperature="NaN"),
        _request(f"p{i}", extra="-Infinity"),
    ]
    return variants[i % len(variants)]


def _text(i: int) -> bytes:
    variants = [
        _request(f"p{i}", messages=f'[{{"role": "user", "content": {LONE}}}]'),
        _request(f"p{i}", metadata=f'{{"team": {LONE}}}'),
        _request(f"p{i}", metadata=f'{{{LONE}: "v"}}'),
        _request(f"p{i}", tenant=LONE),
        # The surrogate as raw (CESU-style) bytes: json.loads decodes it all the same.
        _request(f"p{i}", tenant='"\\udfff"').replace(b"\\udfff", b"\xed\xbf\xbf"),
    ]
    return variants[i % len(variants)]


@dataclass(frozen=True)
class Kind:
    name: str
    reason: str
    count: int
    make: Callable[[int], bytes]


#: 10,030 malformed records in all.
KINDS: tuple[Kind, ...] = (
    Kind("not JSON", "not_json", 2000, _not_json),
    Kind("not an object", "not_object", 1000, _not_object),
    Kind("schema violation", "schema_violation", 2000, _schema),
    Kind("unknown route", "unknown_route", 1000, _unknown_route),
    Kind("oversized (1.1 MB)", "oversized", 30, _oversized),
    Kind("deep nesting (10k / 65)", "too_deep", 1000, _deep),
    Kind("huge int, long int, NaN", "bad_number", 1000, _number),
    Kind("lone surrogates", "bad_text", 2000, _text),
)


def valid(request_id: str, large: bool = False) -> bytes:
    """A valid request; ``large``: 999.7 KB, just under the 1,000,000-byte limit."""
    content = "x" * 999_600 if large else f"Say hello ({request_id})"
    body = {
        "request_id": request_id,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 16,
        "metadata": {"bench": "poison"},
    }
    return json.dumps(body).encode()
