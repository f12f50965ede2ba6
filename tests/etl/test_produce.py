"""``featurehouse produce`` against a real local Kafka broker: the records are the landing lines, byte for byte,
in hour order; Spark's Kafka source reads them back; bad flags and a missing broker are one-line errors."""

from __future__ import annotations

import datetime as dt
import socket
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from etl.kafka import produce
from etl.generate.job import GenerateConfig
from etl.generate.job import run as generate
from etl.kafka.admin import BrokerError
from etl.kafka.broker import local_broker
from etl.kafka.produce import ProduceConfig, main, run
from schemas.errors import ConfigError

pytestmark = pytest.mark.slow

DS = "2026-11-01"
#: Appended to one impression file: not JSON, not UTF-8, a carriage return: sent as it is.
MALFORMED = b'{"impression_id": "i-broken", \xff\xfe not json\r'


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("produce")
    generate(GenerateConfig(home=home, days=1, impressions_per_day=300, users=200, items=100, seed=3))
    with next((home / "landing/impressions" / f"ds={DS}").glob("hour=05/*.jsonl")).open("ab") as out:
        out.write(MALFORMED + b"\n")
    return home


@pytest.fixture(scope="module")
def produced(home: Path, kafka_broker):
    config = ProduceConfig(home=home, dataset="ads", start=dt.date.fromisoformat(DS),
                           bootstrap=kafka_broker.bootstrap, topic_prefix="t_produce")  # fmt: skip
    return run(config)


def file_lines(home: Path, stream: str) -> list[bytes]:
    """The ds's lines of a landing table in hour order, as ``produce`` sends them."""
    lines = []
    for path in sorted((home / "landing" / stream / f"ds={DS}").glob("hour=*/*.jsonl")):
        lines += path.read_bytes().split(b"\n")[:-1]
    return lines


def consume(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every record of a one-partition topic, from the beginning to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, f"no end of {topic} within 10s"
            if message.error() and message.error().code() == KafkaError._PARTITION_EOF:
                return records
            assert message.error() is None, message.error()
            records.append((message.key(), message.value()))
    finally:
        consumer.close()


def test_records_are_the_landing_lines_in_hour_order(home, produced, kafka_broker):
    counts = {count.topic: count.lines for count in produced.topics}
    for stream in ("impressions", "labels"):
        topic, expected = f"t_produce.ads.{stream}", file_lines(home, stream)
        records = consume(kafka_broker.bootstrap, topic)
        assert all(key is None for key, _ in records)
        assert [value for _, value in records] == expected
        assert counts[topic] == len(expected) > 0
    assert MALFORMED in file_lines(home, "impressions")
    assert produced.format().splitlines()[0].startswith(f"produced ads ds {DS} from {home / 'landing'}")


def test_rate_caps_lines_per_second(home, produced, kafka_broker):
    config = ProduceConfig(home=home, dataset="ads", start=dt.date.fromisoformat(DS),
                           bootstrap=kafka_broker.bootstrap, topic_prefix="t_rate", rate=1000)  # fmt: skip
    summary = run(config)
    assert [c.lines for c in summary.topics] == [c.lines for c in produced.topics]
    assert summary.elapsed_s >= 0.9 * summary.lines / 1000
    assert "--rate 1000" in summary.format()


def test_spark_kafka_source_reads_the_topic(spark, home, produced, kafka_broker):
    def kafka(reader):  # noqa: ANN001, ANN202 - a DataFrameReader or DataStreamReader
        return (reader.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
                .option("subscribe", "t_produce.ads.labels").option("startingOffsets", "earliest"))  # fmt: skip

    assert kafka(spark.readStream).load().isStreaming
    rows = kafka(spark.read).option("endingOffsets", "latest").load().select("key", "value").collect()
    assert len(rows) == produced.topics[1].lines
    assert {row.key for row in rows} == {None}
    assert sorted(bytes(row.value) for row in rows) == sorted(file_lines(home, "labels"))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--bootstrap", "localhost"], "--bootstrap 'localhost' is not HOST:PORT"),
        (["--rate", "0"], "--rate must be a positive number"),
        (["--days", "0"], "--days must be a positive whole number"),
        (["--topic-prefix", "a/b"], "--topic-prefix 'a/b' is not a Kafka topic name part"),
        (["--ds", "2026-11-1"], "--ds '2026-11-1' is not a date"),
        (["--ds", "2027-01-01"], "no landing partition of ds 2027-01-01 under "),
    ],
)
def test_bad_flags_are_one_line_errors(home, flags, message, capsys):
    # A free port with nothing on it: every case fails before it would connect.
    args = ["--dataset", "ads", "--ds", DS, "--bootstrap", "127.0.0.1:9", "--home", str(home), *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_no_broker_at_bootstrap(home, monkeypatch):
    monkeypatch.setattr(produce, "CONNECT_TIMEOUT_S", 1.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        with pytest.raises(BrokerError, match=f"no Kafka broker answered at --bootstrap {bootstrap} within 1s"):
            run(ProduceConfig(home=home, dataset="ads", start=dt.date.fromisoformat(DS), bootstrap=bootstrap))


def test_local_broker_without_jars_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("FEATUREHOUSE_KAFKA_JARS", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"no Kafka broker jars in .*empty; run `make jars`"):
        with local_broker(tmp_path / "broker"):
            pass
