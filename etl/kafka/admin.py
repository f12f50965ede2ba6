"""Kafka topic administration: whether a broker answers, and creating the topics the streaming jobs use.

Any broker will do: the local one of ``etl/kafka/broker.py`` or another one. Example::

    if answers("127.0.0.1:9092"):
        create_topics("127.0.0.1:9092", ["featurehouse.ads.impressions"])
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.errors import FeaturehouseError


class BrokerError(FeaturehouseError):
    """A Kafka broker did not start, did not answer, or refused records."""


def answers(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """Whether a broker at ``bootstrap`` answers a metadata request with at least one live broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})  # no connection-refused noise
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except KafkaException:
        return False


def create_topics(bootstrap: str, topics: Sequence[str], *, partitions: int = 1, timeout_s: float = 30) -> None:
    """Create the ``topics`` that do not exist yet (replication: the broker's default); existing ones are kept."""
    new = [NewTopic(topic, num_partitions=partitions) for topic in dict.fromkeys(topics)]
    if not new:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})  # failures are raised below
    for topic, future in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as err:
            error = err.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerError(f"could not create Kafka topic {topic!r} at {bootstrap}: {error.str()}") from err
