"""The one topic rule, as both ends of Kafka take it: the producer and the stream accept and refuse the same
prefixes and name the same topics (no broker or JVM needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from etl.kafka.produce import ProduceConfig
from etl.kafka.topics import check_topic_prefix, topic_name
from etl.records.landing import RecordKind
from etl.stream.job import Source, StreamConfig
from schemas.errors import ConfigError, InvalidNameError


def _both(tmp_path, prefix):
    produce = ProduceConfig(home=tmp_path, dataset="ads", start=dt.date(2026, 11, 1), bootstrap="127.0.0.1:9092",
                            topic_prefix=prefix)  # fmt: skip
    stream = StreamConfig(home=tmp_path, dataset="ads", source=Source.KAFKA, bootstrap="127.0.0.1:9092",
                          topic_prefix=prefix)  # fmt: skip
    return produce, stream


@pytest.mark.parametrize("prefix", ["featurehouse", "My.Prefix", "team-a_v2"])
def test_producer_and_stream_name_the_same_topics(tmp_path, prefix):
    produce, stream = _both(tmp_path, prefix)
    for kind in RecordKind:
        assert produce.topic(kind.value) == stream.topic(kind) == f"{prefix}.ads.{kind.value}"


@pytest.mark.parametrize("prefix", ["a/b", "", "has space", "x" * 201])
def test_producer_and_stream_refuse_the_same_prefixes(tmp_path, prefix):
    for make in (lambda: _both(tmp_path, prefix), lambda: check_topic_prefix(prefix)):
        with pytest.raises(ConfigError, match="is not a Kafka topic name part"):
            make()


def test_topic_name_checks_the_dataset():
    assert topic_name("featurehouse", "ads", "labels") == "featurehouse.ads.labels"
    with pytest.raises(InvalidNameError, match="dataset name .Ads. is not allowed"):
        topic_name("featurehouse", "Ads", "labels")
