"""The embedded brokers by name: ``tansu`` (the pip-only default), ``kafka`` (Apache Kafka,
one node) or ``kafka3`` (three replicated Apache Kafka nodes, app/embedded/kafka_cluster.py).

``up``, ``demo`` and the benches take ``--broker tansu|kafka|kafka3``; every stack they
start runs on the broker named, which the stack starts and stops with itself.
"""

from __future__ import annotations

import argparse
from typing import Final, Literal

from app.embedded.broker import EmbeddedBroker
from app.embedded.kafka import KafkaBroker
from app.embedded.kafka_cluster import KafkaCluster

BrokerKind = Literal["tansu", "kafka", "kafka3"]
BROKER_KINDS: Final[tuple[BrokerKind, ...]] = ("tansu", "kafka", "kafka3")
#: Any embedded broker: what an :class:`~app.embedded.stack.EmbeddedStack` runs on.
AnyBroker = EmbeddedBroker | KafkaBroker | KafkaCluster


def embedded_broker(kind: BrokerKind = "tansu", host: str = "127.0.0.1") -> AnyBroker:
    """A broker of ``kind`` on ``host`` (not started)."""
    if kind == "kafka":
        return KafkaBroker(host)
    if kind == "kafka3":
        return KafkaCluster(host=host)
    if kind == "tansu":
        return EmbeddedBroker(host)
    raise ValueError(f"broker {kind!r}: one of {', '.join(BROKER_KINDS)}")


def add_broker_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        choices=BROKER_KINDS,
        default="tansu",
        help="the embedded broker: tansu (default, pip only), kafka (Apache Kafka; a JDK "
        "and Maven resolve its jars once into ~/.cache/switchyard) or kafka3 (three "
        "replicated Kafka nodes: topics of 3 copies, 2 in sync)",
    )
