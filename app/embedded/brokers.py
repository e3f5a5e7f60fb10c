"""The embedded brokers by name: ``tansu`` (the pip-only default) or ``kafka`` (Apache Kafka).

``up``, ``demo`` and the benches take ``--broker tansu|kafka``; every stack they start
runs on the broker named, which the stack starts and stops with itself.
"""

from __future__ import annotations

import argparse
from typing import Final, Literal

from app.embedded.broker import EmbeddedBroker
from app.embedded.kafka import KafkaBroker

BrokerKind = Literal["tansu", "kafka"]
BROKER_KINDS: Final[tuple[BrokerKind, ...]] = ("tansu", "kafka")


def embedded_broker(
    kind: BrokerKind = "tansu", host: str = "127.0.0.1"
) -> EmbeddedBroker | KafkaBroker:
    """A broker of ``kind`` on ``host`` (not started)."""
    if kind == "kafka":
        return KafkaBroker(host)
    if kind == "tansu":
        return EmbeddedBroker(host)
    raise ValueError(f"broker {kind!r}: one of {', '.join(BROKER_KINDS)}")


def add_broker_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        choices=BROKER_KINDS,
        default="tansu",
        help="the embedded broker: tansu (default, pip only) or kafka (Apache Kafka; a JDK "
        "and Maven resolve its jars once into ~/.cache/switchyard)",
    )
