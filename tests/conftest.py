"""Shared fixtures: one local SparkSession per test process (Delta on, metastore in a temp dir),
one local Kafka broker, and helpers that write landing-zone files and small registries; and the lanes
``make test`` runs the suite in (``pytest -n 2 --dist loadfile``, see ``pytest_xdist_make_scheduler``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from etl.kafka.broker import Broker

#: Test modules that share one group, hence one xdist lane and one session fixture: the Kafka users (one broker).
SHARED_GROUPS = {"tests/etl/test_stream.py": "kafka", "tests/etl/test_produce.py": "kafka"}
#: The longest groups, longest first (seconds, 2026-12-06: the stream's kill cases ~420, Airflow ~340 beside other
#: work (its Spark tasks on the engine), cluster ~300, the engine ~300, Kafka (the other stream tests and the
#: producer) ~250, DPP ~250, CLI ~120): a lane that takes one of these early leaves the short modules to the
#: other, so the two lanes end together. Every other module follows in collection order.
LONGEST_FIRST = ["tests/etl/test_stream_restarts.py", "tests/airflow/test_dags.py", "tests/test_cluster.py",
                 "tests/warehouse/test_engine.py", "kafka", "tests/ingest/test_dpp.py",
                 "tests/test_cli_end_to_end.py"]  # fmt: skip


def _group(module: str) -> str:
    return SHARED_GROUPS.get(module, module)


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 - xdist's Scheduling
    """``--dist loadfile`` with the Kafka users in one lane: one group per test module (its module fixtures built
    once, its tests in order in one lane), except that ``SHARED_GROUPS`` share one. (xdist's own ``loadgroup``
    marks do not reach its scheduler under pytest 9.2 with xdist 3.8: a marked test's id keeps no group suffix.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleLanes(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid.split("::", 1)[0])

    return ModuleLanes(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest groups first, then the others in collection order; a module's tests keep their order. Without
    xdist the order is the run's."""
    root = Path(config.rootpath)
    group = {item: _group(item.path.relative_to(root).as_posix()) for item in items}
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(group[item], len(first_seen))
    items.sort(key=lambda item: (rank.get(group[item], len(rank)), first_seen[group[item]]))


SMALL_REGISTRY = """\
dataset: {dataset}
description: test dataset
owner: tests
labels:
  - {{name: click, window: 1h}}
  - {{name: conversion, window: 3d}}
features:
  - {{name: user_ctr_7d, kind: dense, dtype: float32, default: 0.0, description: ctr, owner: t}}
  - {{name: item_price, kind: dense, dtype: float64, description: price, owner: t}}
  - {{name: user_topic_ids, kind: sparse, dtype: int64, default: [], description: topics, owner: t}}
  - {{name: user_topic_affinity, kind: weighted_sparse, dtype: int64, description: affinity, owner: t}}
"""


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("featurehouse_home")


@pytest.fixture(scope="session")
def spark(spark_home: Path):
    """The one SparkSession of the test run: local[2], UI off, few shuffle partitions."""
    from pyspark.sql import SparkSession

    from warehouse.confs import session_confs

    from warehouse.session import configure_builder

    confs = session_confs(
        spark_home,
        {
            "spark.master": "local[2]",
            "spark.app.name": "featurehouse-tests",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "1",
        },
    )
    session = configure_builder(SparkSession.builder, confs).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One local Kafka broker for the test run (``etl.kafka.broker.local_broker``); skipped without its jars or
    Java (``make test`` resolves the jars)."""
    from etl.kafka.broker import local_broker
    from schemas.errors import ConfigError

    with ExitStack() as stack:
        try:
            broker = stack.enter_context(local_broker(tmp_path_factory.mktemp("kafka")))
        except ConfigError as err:
            pytest.skip(f"no local Kafka broker: {err}")
        yield broker


@pytest.fixture
def registry_dir(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A registry folder with one small dataset named after the test (unique per test)."""
    directory = tmp_path / "registry"
    directory.mkdir()
    dataset = dataset_name(request)
    (directory / f"{dataset}.yaml").write_text(SMALL_REGISTRY.format(dataset=dataset))
    return directory


def dataset_name(request: pytest.FixtureRequest) -> str:
    """A dataset name unique to the test, safe for the name pattern."""
    name = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())
    return ("t_" + name)[:60].rstrip("_")


def write_landing(
    root: Path, stream: str, ds: str, records: Iterable[dict | str], *, hour: str = "00", close: bool = True,
    part: str = "part-00000.jsonl",
) -> Path:
    """Write JSON lines (dicts are dumped, strings written as they are) into a landing partition."""
    folder = root / stream / f"ds={ds}" / f"hour={hour}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / part
    with path.open("a", encoding="utf-8") as out:
        for record in records:
            out.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
    if close:
        (root / stream / f"ds={ds}" / "_SUCCESS").touch()
    return path


def close_partition(root: Path, stream: str, ds: str) -> None:
    folder = root / stream / f"ds={ds}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_SUCCESS").touch()


@pytest.fixture(scope="session", autouse=True)
def _engines_stop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Engines that commands start in tests (``warehouse.engine``) stop after 5 idle minutes, not 30, and every one
    still running under this process's temporary folder is stopped at the end of the run."""
    import os

    os.environ.setdefault("FEATUREHOUSE_ENGINE_IDLE_MINUTES", "5")
    yield
    from warehouse.engine.client import running_engine, stop_engine
    from warehouse.engine.state import EngineFiles

    for state_file in tmp_path_factory.getbasetemp().glob("**/engine/state.json"):
        files = EngineFiles(state_file.parent.parent)
        state = running_engine(files)
        if state is not None:
            stop_engine(files, state)


@pytest.fixture(autouse=True)
def _no_ambient_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read the developer's FEATUREHOUSE_HOME."""
    monkeypatch.delenv("FEATUREHOUSE_HOME", raising=False)
