"""A local single-node Apache Kafka broker, for runs and tests (topic administration: ``etl/kafka/admin.py``).

:func:`local_broker` runs Kafka's own broker (KRaft: broker and controller in one JVM,
listening on 127.0.0.1 only) from the jars ``make jars`` resolves into ``.jvm/kafka``
(``jvm/kafka/pom.xml``). Its storage is formatted afresh on every start: a broker for
one run or one test session, not for keeping data. Example::

    with local_broker(Path("/tmp/kafka")) as broker:
        create_topics(broker.bootstrap, ["featurehouse.ads.impressions"])  # etl.kafka.admin
        ...  # featurehouse produce --bootstrap {broker.bootstrap} ...
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from etl.kafka.admin import BrokerError, answers
from schemas.errors import ConfigError
from warehouse.processes import (
    HOST,
    free_ports,
    java,
    port_open,
    stop,
    tail,
    wait_until_ready,
)

KAFKA_JARS_VARIABLE = "FEATUREHOUSE_KAFKA_JARS"
DEFAULT_KAFKA_JARS = Path(__file__).resolve().parents[2] / ".jvm" / "kafka"  # <repo>/.jvm/kafka
#: The broker's package (keep in step with jvm/kafka/pom.xml).
KAFKA_PACKAGE = "org.apache.kafka:kafka_2.13:4.4.0"
STOP_TIMEOUT_S = 15.0

_LOG4J2 = """\
shutdownHook = disable
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
"""


@dataclass(frozen=True)
class Broker:
    """A running broker: where clients connect, and its log (stdout and stderr of the JVM)."""

    bootstrap: str
    log: Path


def kafka_jars_dir() -> Path:
    """Where the broker's jars are: ``$FEATUREHOUSE_KAFKA_JARS``, else ``<repo>/.jvm/kafka``."""
    return Path(os.environ.get(KAFKA_JARS_VARIABLE) or DEFAULT_KAFKA_JARS)


def _classpath() -> str:
    jars = kafka_jars_dir()
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise ConfigError(f"no Kafka broker jars in {jars}; run `make jars` (resolves {KAFKA_PACKAGE} from "
                          f"Maven Central once into .jvm/kafka), or point ${KAFKA_JARS_VARIABLE} at a folder of "
                          "them")  # fmt: skip
    return f"{jars}/*"


def _properties(folder: Path, port: int, controller_port: int) -> str:
    """A KRaft combined broker+controller for one machine: replication 1 everywhere."""
    return f"""\
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers={HOST}:{controller_port}
log.dirs={folder / "data"}
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def _cluster_id() -> str:
    """A random Kafka cluster id: 16 bytes, URL-safe base64 without padding, not starting with '-'."""
    while (text := base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()).startswith("-"):
        pass
    return text


@contextmanager
def local_broker(folder: Path, *, port: int | None = None, startup_timeout_s: float = 60) -> Iterator[Broker]:
    """Run a single-node Kafka broker with its files under ``folder``; stop it on exit, whatever happened.

    ``port`` is the client port (a free one when None); the controller takes another free
    port. Returns once the broker answers a metadata request, at most ``startup_timeout_s``
    after the JVM starts. ``folder/data`` is formatted afresh (removed first);
    ``folder/broker.log`` gets the JVM's output.
    """
    java_bin, classpath = java("the Kafka broker"), _classpath()
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "data", ignore_errors=True)
    free = free_ports(2)
    port, controller_port = port or free[0], free[1]
    config, log4j, log = folder / "server.properties", folder / "log4j2.properties", folder / "broker.log"
    config.write_text(_properties(folder, port, controller_port))
    log4j.write_text(_LOG4J2)
    jvm = [java_bin, "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
    with log.open("wb") as out:
        formatted = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "--config", str(config),
                                    "--cluster-id", _cluster_id(), "--standalone"],
                                   stdout=out, stderr=subprocess.STDOUT, check=False)  # fmt: skip
        if formatted.returncode != 0:
            raise BrokerError(f"formatting Kafka storage in {folder / 'data'} failed (status {formatted.returncode}); "
                              f"{log}:\n{tail(log)}")  # fmt: skip
        process = subprocess.Popen([*jvm, "kafka.Kafka", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    bootstrap = f"{HOST}:{port}"
    try:
        wait_until_ready(f"the Kafka broker at {bootstrap}", lambda: port_open(HOST, port) and answers(bootstrap),
                         process, log, timeout_s=startup_timeout_s, interval_s=0.2, error=BrokerError)  # fmt: skip
        yield Broker(bootstrap=bootstrap, log=log)
    finally:
        stop(process, timeout_s=STOP_TIMEOUT_S)
