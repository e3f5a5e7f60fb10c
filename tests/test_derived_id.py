"""Derived ids are ``uuid5(namespace, "a/b/c")``, whatever shortcut computes them."""

from __future__ import annotations

import random
import uuid
from enum import StrEnum

from app.contract.base import _ID_NAMESPACE, derived_id


class Kind(StrEnum):
    DECISION = "decision"


def test_derived_id_is_uuid5_of_its_parts_joined() -> None:
    rng = random.Random(11)
    for _ in range(5000):
        parts: tuple[object, ...] = (
            rng.choice(["decision", "dispatch", "response", Kind.DECISION]),
            str(uuid.UUID(int=rng.getrandbits(128))),
            rng.randint(-3, 40),
            rng.random(),
        )[: rng.randint(1, 4)]
        joined = "/".join(str(p) for p in parts)
        assert derived_id(*parts) == str(uuid.uuid5(_ID_NAMESPACE, joined))


def test_derived_id_of_non_ascii_and_empty_parts() -> None:
    for parts in [(), ("",), ("é", "日本", 0), ("a/b", None, 1.5)]:
        joined = "/".join(str(p) for p in parts)
        assert derived_id(*parts) == str(uuid.uuid5(_ID_NAMESPACE, joined))
