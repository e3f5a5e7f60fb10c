"""The envelope every event shares, and the few models the rest of the contract builds on.

Ids of derived events are deterministic (UUIDv5 of what they are about), so a
replay or a redelivery produces the same id and consumers can drop duplicates by id.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1
_ID_NAMESPACE = uuid.UUID("5d1c3b52-6f0e-4c1e-9a44-7a9b1f3f0c11")
_ID_HASH = hashlib.sha1(_ID_NAMESPACE.bytes, usedforsecurity=False)


#: The hex digit at a UUID's variant position, by the digest's digit there (RFC 4122: 10xx).
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
_new_hash = _ID_HASH.copy


def derived_id(*parts: object) -> str:
    """A stable event id from what the event is about: ``uuid5(namespace, "a/b/c")``.

    Computed from a pre-seeded SHA-1 (the same bytes ``uuid.uuid5`` hashes), and set
    in its hex form (the version digit ``5`` and the variant digit): ids sit on the
    routing fold's hot path (tests/test_derived_id.py checks it against ``uuid5``).
    """
    digest = _new_hash()
    digest.update("/".join([p if type(p) is str else str(p) for p in parts]).encode())
    text = digest.hexdigest()
    return (
        f"{text[:8]}-{text[8:12]}-5{text[13:16]}-{_VARIANT_DIGIT[text[16]]}{text[17:20]}-"
        f"{text[20:32]}"
    )


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    def __eq__(self, other: object) -> bool:
        """Pydantic's equality, without what these models never have (generic origins,
        private attributes, extra fields, cached properties): the same class and the same
        field values. Replay compares every decision and response it re-derives."""
        if type(other) is type(self):
            return self.__dict__ == other.__dict__
        return False if isinstance(other, BaseModel) else NotImplemented


class Envelope(Frozen):
    id: str
    schema_version: int = SCHEMA_VERSION
    occurred_at: datetime


class LogPosition(Frozen):
    topic: str
    partition: int
    offset: int


GradeSource = Literal["user", "judge", "task", "heuristic"]
