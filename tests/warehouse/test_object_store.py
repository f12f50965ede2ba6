"""Tables on s3a://: the label join writes its Delta table into a bucket through Hadoop's S3A connector.

The bucket is served by moto (tests/moto.py: an S3 test double on 127.0.0.1, not S3 itself). The
job runs as its own process: the test run's shared SparkSession lacks the S3A jars (.jvm/s3), and a
second Spark application needs a --home of its own for its embedded metastore. The table is read back
from the bucket without a JVM (deltalake's QueryBuilder: feature tables are column-mapped).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from etl.generate.job import GenerateConfig
from etl.generate.job import run as generate
from schemas.errors import ConfigError
from tests.conftest import SMALL_REGISTRY
from tests.moto import KEYS, moto_server, s3_client
from warehouse.object_store import delta_rs_storage_options, s3_jars, s3a_confs

DATASET = "t_s3"
DS = "2026-11-01"
BUCKET = "featurehouse-test"
TABLE_PREFIX = f"warehouse/featurehouse.db/{DATASET}/"
REPO = Path(__file__).resolve().parents[2]


def test_s3_jars_refuses_an_empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEATUREHOUSE_S3_JARS", raising=False)
    with pytest.raises(ConfigError, match=r"no S3A connector .* run `make s3-jars`"):
        s3_jars(tmp_path)


def test_s3a_confs_for_a_server_of_your_own() -> None:
    confs = s3a_confs("http://127.0.0.1:9000", **KEYS, jars=False)
    assert confs == {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": "testing",
        "spark.hadoop.fs.s3a.secret.key": "testing",
    }
    with pytest.raises(ConfigError, match="both access_key and secret_key"):
        s3a_confs("http://127.0.0.1:9000", access_key="only-one", jars=False)


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server with one empty bucket (tests/moto.py); stopped at the end of the module."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log", BUCKET) as endpoint:
        yield endpoint


def _summary_count(stdout: str, label: str) -> int:
    match = re.search(rf"^  {label}\s+([\d,]+)", stdout, re.MULTILINE)
    assert match, f"no '{label}' line in the label join's summary:\n{stdout}"
    return int(match.group(1).replace(",", ""))


@pytest.fixture(scope="module")
def joined(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory):
    """One label join (its own Spark application) of a generated day, the warehouse on s3a://BUCKET/warehouse."""
    try:
        confs = s3a_confs(s3_endpoint, **KEYS)
    except ConfigError as err:
        pytest.skip(str(err))
    root = tmp_path_factory.mktemp("object_store")
    registry_dir = root / "registry"
    registry_dir.mkdir()
    (registry_dir / f"{DATASET}.yaml").write_text(SMALL_REGISTRY.format(dataset=DATASET))
    generated = generate(GenerateConfig(home=root, dataset=DATASET, registry_dir=registry_dir, days=2,
                                        impressions_per_day=150, users=500, items=200, seed=11))  # fmt: skip
    confs |= {
        "spark.sql.warehouse.dir": f"s3a://{BUCKET}/warehouse",
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "1",
    }
    home = root / "spark"
    args = [sys.executable, "-m", "featurehouse.cli", "label-join", "--dataset", DATASET, "--ds", DS,
            "--home", str(home), "--landing", str(root / "landing"), "--registry-dir", str(registry_dir),
            "--engine", "off"]  # fmt: skip  (its own S3 settings: a session of its own, not the home's engine)
    for key, value in confs.items():
        args += ["--conf", f"{key}={value}"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"label join on s3a failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-6000:]}"
    day = next(d for d in generated.impression_days if d.ds == DS)
    return s3_endpoint, home, day, done.stdout


@pytest.mark.spark
@pytest.mark.slow
def test_the_delta_table_lives_in_the_bucket(joined) -> None:
    endpoint, home, _day, stdout = joined
    listed = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=TABLE_PREFIX)
    keys = {obj["Key"] for page in listed for obj in page.get("Contents", [])}
    log_prefix = TABLE_PREFIX + "_delta_log/"
    log = sorted(k.removeprefix(log_prefix) for k in keys if k.startswith(log_prefix))
    version = int(re.search(r"\(Delta version (\d+)\)", stdout).group(1))
    assert {f"{v:020d}.json" for v in range(version + 1)} <= set(log), log
    from deltalake import DeltaTable

    table = DeltaTable(f"s3://{BUCKET}/{TABLE_PREFIX}", storage_options=delta_rs_storage_options(endpoint, **KEYS))
    assert table.version() == version
    data_files = {uri.removeprefix(f"s3://{BUCKET}/") for uri in table.file_uris()}
    assert data_files and data_files <= keys  # every file of the snapshot is an object in the bucket
    assert not (home / "warehouse" / "featurehouse.db").exists()  # and nothing of the table went to local disk
    # the catalog's statistics are not read from object storage yet (no credentials for deltalake): said, not failed
    assert re.search(r"^  statistics +not computed \(featurehouse\.t_s3 is on object storage \(s3a://", stdout, re.M), stdout


@pytest.mark.spark
@pytest.mark.slow
def test_the_partition_reads_back_from_s3(joined) -> None:
    endpoint, _home, day, stdout = joined
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(f"s3a://{BUCKET}/{TABLE_PREFIX}", storage_options=delta_rs_storage_options(endpoint, **KEYS))
    row = pa.table(
        QueryBuilder()
        .register("t", table)
        .execute("SELECT count(*) AS n, count(DISTINCT impression_id) AS ids, sum(label_click) AS clicks, "
                 f"sum(label_conversion) AS conversions FROM t WHERE ds = '{DS}'")  # fmt: skip
        .read_all()
    ).to_pylist()[0]
    assert row["n"] == row["ids"] == _summary_count(stdout, "rows out") == day.distinct
    assert row["clicks"] == _summary_count(stdout, "positives click") == day.clicks
    assert row["conversions"] == _summary_count(stdout, "positives conversion") == day.conversions
