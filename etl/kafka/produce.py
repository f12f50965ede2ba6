"""Publish landing-zone JSON lines to Kafka (``featurehouse produce``), for the streaming job.

For each ds, hour by hour, the hour's impression lines go to ``PREFIX.DATASET.impressions``
and then the same hour's label lines (label partition of the same ds) to
``PREFIX.DATASET.labels``, so event time roughly advances as it would live. A record's
value is the line's bytes exactly as in the file (malformed lines too: the stream job
quarantines them), its key null. Missing topics are created with one partition (order kept).

Example::

    featurehouse produce --dataset ads --ds 2026-11-01 --days 2 --bootstrap 127.0.0.1:9092 --rate 5000
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer
from tabulate import tabulate

from etl.kafka.admin import BrokerError, answers, create_topics
from etl.kafka.topics import DEFAULT_TOPIC_PREFIX, check_topic_prefix, topic_name
from schemas.config import POSITIVE_NUMBER, LandingDaysConfig, satisfies
from schemas.errors import ConfigError, LandingError
from schemas.exit import run_command
from schemas.names import format_ds, parse_ds
from schemas.paths import default_home
from schemas.progress import Progress, silent

KINDS = ("impressions", "labels")  # the landing record kinds, per hour, in this order
HOURS = tuple(f"{hour:02d}" for hour in range(24))
BOOTSTRAP = re.compile(r"^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$")
CONNECT_TIMEOUT_S = 10.0
FLUSH_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class ProduceConfig(LandingDaysConfig):
    """What to publish and where; validated on construction."""

    bootstrap: str
    rate: float | None = None  # lines per second over both topics; None: as fast as possible
    topic_prefix: str = DEFAULT_TOPIC_PREFIX

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.bootstrap, str) or not BOOTSTRAP.fullmatch(self.bootstrap):
            raise ConfigError(f"--bootstrap {self.bootstrap!r} is not HOST:PORT[,HOST:PORT...], "
                              "e.g. --bootstrap 127.0.0.1:9092")  # fmt: skip
        if not satisfies(self.rate, POSITIVE_NUMBER, optional=True):
            raise ConfigError(f"--rate must be a positive number of lines per second, got {self.rate!r}; "
                              "leave it out to send as fast as possible")  # fmt: skip
        check_topic_prefix(self.topic_prefix)

    def topic(self, kind: str) -> str:
        return topic_name(self.topic_prefix, self.dataset, kind)


@dataclass
class TopicCount:
    """Lines and bytes sent to one topic."""

    topic: str
    lines: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class ProduceSummary:
    """What ``run`` published."""

    config: ProduceConfig
    topics: tuple[TopicCount, ...]
    elapsed_s: float

    @property
    def lines(self) -> int:
        return sum(t.lines for t in self.topics)

    def format(self) -> str:
        """A short report for people."""
        c, days = self.config, self.config.dates
        span = format_ds(days[0]) + (f"..{format_ds(days[-1])} ({len(days)} days)" if len(days) > 1 else "")
        cap = f", --rate {c.rate:g}" if c.rate else ""
        rows = [(t.topic, f"{t.lines:,} lines", f"{t.bytes / 1e6:,.1f} MB") for t in self.topics]
        return "\n".join([
            f"produced {c.dataset} ds {span} from {c.landing} to {c.bootstrap} in {self.elapsed_s:.1f}s "
            f"({self.lines / max(self.elapsed_s, 1e-9):,.0f} lines/s{cap})",
            tabulate(rows, tablefmt="plain", colalign=("left", "right", "right"), disable_numparse=True),
        ])


class _Sender:
    """One producer: keeps to ``rate`` lines/s, waits while its queue is full, counts delivery failures."""

    def __init__(self, bootstrap: str, rate: float | None) -> None:
        # Idempotence: a retried batch is neither duplicated nor reordered.
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
        self.bootstrap, self.rate = bootstrap, rate
        self.sent, self.failed, self.first_error = 0, 0, ""
        self.began = time.perf_counter()

    def send(self, topic: str, value: bytes) -> None:
        while self.rate and (ahead := self.sent / self.rate - (time.perf_counter() - self.began)) > 0.001:
            self.producer.poll(ahead)
        while True:
            try:
                self.producer.produce(topic, value=value, on_delivery=self._delivered)
                break
            except BufferError:  # the local queue is full: serve deliveries until it has room
                self.producer.poll(0.1)
        self.producer.poll(0)
        self.sent += 1

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed += 1
            self.first_error = self.first_error or err.str()

    def finish(self) -> float:
        """Wait for every delivery; the seconds since the sender began. Raises if a line was not delivered."""
        unsent = self.producer.flush(FLUSH_TIMEOUT_S)
        if unsent or self.failed:
            raise BrokerError(f"{self.failed + unsent:,} of {self.sent:,} lines were not delivered to "
                              f"{self.bootstrap} (first error: {self.first_error or 'flush timed out'}); check the "
                              "broker and run again (lines already delivered are sent again)")  # fmt: skip
        return time.perf_counter() - self.began


def parse_args(argv: list[str] | None = None) -> ProduceConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse produce",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Publish the landing zone's JSON lines (written by `featurehouse generate`) to Kafka:\n\n"
        "  HOME/landing/impressions/ds=DS/hour=HH/*.jsonl -> PREFIX.DATASET.impressions\n"
        "  HOME/landing/labels/ds=DS/hour=HH/*.jsonl      -> PREFIX.DATASET.labels\n\n"
        "Day by day and hour by hour: an hour's impressions, then the same hour's labels. Each line\n"
        "is one record, its bytes unchanged, with a null key. Missing topics are created (1 partition).",
    )
    parser.add_argument("--dataset", required=True, help="dataset whose landing logs to send, e.g. ads")
    parser.add_argument("--ds", required=True, help="first ds to send, YYYY-MM-DD")
    parser.add_argument("--days", type=int, default=1, help="days to send from --ds on (default: %(default)s)")
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--rate", type=float, default=None,
                        help="at most this many lines per second over both topics (default: as fast as possible)")
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX, help="topics are PREFIX.DATASET.impressions and "
                        "PREFIX.DATASET.labels (default: %(default)s)")
    parser.add_argument("--home", type=Path, default=None,
                        help="data folder; logs are read from HOME/landing (default: $FEATUREHOUSE_HOME, else this checkout's data/)")
    ns = parser.parse_args(argv)  # fmt: skip
    return ProduceConfig(home=ns.home or default_home(), dataset=ns.dataset, start=parse_ds(ns.ds, what="--ds"),
                         bootstrap=ns.bootstrap, days=ns.days, rate=ns.rate, topic_prefix=ns.topic_prefix)  # fmt: skip


def _partitions(config: ProduceConfig) -> dict[tuple[dt.date, str], Path]:
    """Every (day, kind) partition folder to send. A day may lack one kind (the label partitions go on past
    the last impression day); a day with neither is a LandingError, raised before sending."""
    folders = {}
    for day in config.dates:
        found = {kind: config.landing / kind / f"ds={format_ds(day)}" for kind in KINDS}
        found = {kind: folder for kind, folder in found.items() if folder.is_dir()}
        if not found:
            raise LandingError(f"no landing partition of ds {format_ds(day)} under {config.landing}; write it with "
                               f"`featurehouse generate --home {config.home} --dataset {config.dataset} --start "
                               f"{format_ds(day)}`, or pick --ds/--days within what is there")  # fmt: skip
        folders.update({(day, kind): folder for kind, folder in found.items()})
    return folders


def _lines(folder: Path) -> Iterator[bytes]:
    """The lines of an hour folder's files (name order; hidden and _ files skipped, as Spark does), without the
    newline; empty lines are skipped (no record, as in Spark's JSON reader)."""
    for path in sorted(folder.glob("*.jsonl")):
        if path.name.startswith((".", "_")):
            continue
        with path.open("rb") as lines:
            for line in lines:
                line = line.removesuffix(b"\n")
                if line:
                    yield line


def run(config: ProduceConfig, *, progress: Progress | None = None) -> ProduceSummary:
    """Send the configured days to Kafka, flush, and return what was sent; raises if any line was not delivered."""
    say = progress or silent
    folders = _partitions(config)
    if not answers(config.bootstrap, CONNECT_TIMEOUT_S):
        raise BrokerError(f"no Kafka broker answered at --bootstrap {config.bootstrap} within {CONNECT_TIMEOUT_S:g}s; "
                          "start one (etl.kafka.broker.local_broker) or fix --bootstrap")  # fmt: skip
    counts = {kind: TopicCount(config.topic(kind)) for kind in KINDS}
    create_topics(config.bootstrap, [count.topic for count in counts.values()])
    sender = _Sender(config.bootstrap, config.rate)
    for day in config.dates:
        t0, before = time.perf_counter(), sender.sent
        for hour, kind in ((hour, kind) for hour in HOURS for kind in KINDS):
            count = counts[kind]
            if (day, kind) not in folders:
                continue
            for line in _lines(folders[day, kind] / f"hour={hour}"):
                sender.send(count.topic, line)
                count.lines, count.bytes = count.lines + 1, count.bytes + len(line)
        say(f"ds {format_ds(day)}: {sender.sent - before:,} lines queued in {time.perf_counter() - t0:.1f}s")
    return ProduceSummary(config, tuple(counts.values()), sender.finish())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: progress to stderr, the summary to stdout; 2 on a featurehouse error."""
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    return run_command(lambda: run(parse_args(argv), progress=progress).format())


if __name__ == "__main__":
    raise SystemExit(main())
