"""Fixtures of the streaming tests (``tests/etl/test_stream*.py``), made once per test process (xdist worker).

``world``: 5 days of 150 impressions (labels 3 days past), malformed records planted in day 1, and
the batch job's partition of day 1 in ``featurehouse.t_stream_batch``; ``streamed``: the stream over
the whole landing zone, available-now, publishing in this process.
"""

from __future__ import annotations

import pytest

from etl import label_join
from etl.generate.job import GenerateConfig
from etl.generate.job import run as generate
from etl.stream import job as stream
from etl.stream.publish import in_process_publisher
from tests.conftest import SMALL_REGISTRY
from tests.etl.stream_world import BAD_IMPRESSIONS, BAD_LABELS, DATASET, DAY, DS, _config


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory, spark):
    """The landing zone, its registries (the stream's dataset and a copy for the batch job), day 1 joined in batch."""
    home = tmp_path_factory.mktemp("stream_world")
    registry_dir = home / "registry"
    registry_dir.mkdir()
    for name in (DATASET, f"{DATASET}_batch", f"{DATASET}_kafka"):
        # a day of 150 impressions carries 4 planted bad ones; only the gate's bad-record limit is widened
        (registry_dir / f"{name}.yaml").write_text(SMALL_REGISTRY.format(dataset=name) + "quality: {max_bad_fraction: 0.5}\n")
    generate(GenerateConfig(home=home, dataset=DATASET, registry_dir=registry_dir, days=5, impressions_per_day=150,
                            users=500, items=200, seed=3))  # fmt: skip
    landing = home / "landing"
    for stream_name, lines in (("impressions", BAD_IMPRESSIONS), ("labels", BAD_LABELS)):
        folder = landing / stream_name / f"ds={DS}" / "hour=05"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part-bad.jsonl").write_text("\n".join(lines) + "\n")
    batch = label_join.run(spark, label_join.LabelJoinConfig(dataset=f"{DATASET}_batch", ds=DAY, home=home / "batch",
                                                             landing=str(landing), registry_dir=registry_dir))  # fmt: skip
    assert batch.published and batch.quarantined_impressions == 4 and batch.quarantined_labels == 2
    return home, registry_dir, landing


@pytest.fixture(scope="session")
def streamed(world, spark):
    """The stream over the whole landing zone, available-now, publishing in this process."""
    home, registry_dir, landing = world
    config = _config(home / "files", registry_dir, landing)
    summary = stream.run(spark, config, publisher=in_process_publisher(spark, config))
    return config, summary
