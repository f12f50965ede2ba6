"""Coalesced reads and reads from object storage (``ingest.projected_reads``, ``schemas.storage``): no JVM.

The table is written by deltalake (no column mapping: physical names are the logical ones), two days of
two row groups each, with 16 dense columns and 2 list columns; the job reads a scattered few of them,
so a wide gap would read unselected columns if the waste rule let it. The same table copied into a
bucket of moto's S3 server (tests/moto.py) must read to the same tables, in the requests counted.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.loader import ResumableLoader, SnapshotDataset
from ingest.projected_reads import Coalescing
from ingest.snapshot import open_snapshot
from ingest.usage import UsageRecord, record_usage
from schemas.catalog import FEATURE_USAGE_SCHEMA
from schemas.errors import ConfigError, TableError
from schemas.registry import load_dataset
from schemas.storage import Store
from tests.conftest import SMALL_REGISTRY
from tests.moto import KEYS, free_port, moto_server, s3_client

DAYS = [dt.date(2026, 11, 1), dt.date(2026, 11, 2)]
ROWS = 4000  # a day: two row groups of 2000
COLUMNS = ["f0", "f3", "f7", "f12", "s1", "label_click"]  # scattered: unselected columns lie between them
BUCKET = "featurehouse-reads"
PREFIX = "warehouse/featurehouse.db/reads"


def _day(day: dt.date, rng: np.random.Generator) -> pa.Table:
    columns = {f"f{i}": rng.normal(size=ROWS) for i in range(16)}
    lengths = rng.integers(0, 6, size=(2, ROWS))
    for k in range(2):
        offsets = np.concatenate([[0], np.cumsum(lengths[k])]).astype(np.int32)
        values = pa.array(rng.integers(0, 1 << 40, size=int(offsets[-1])), pa.int64())
        columns[f"s{k}"] = pa.ListArray.from_arrays(pa.array(offsets), values)
    columns["label_click"] = rng.integers(0, 2, size=ROWS).astype(np.int32)
    columns["ds"] = [day.isoformat()] * ROWS
    return pa.table(columns)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[str, object]:
    import deltalake
    from deltalake import WriterProperties

    root = tmp_path_factory.mktemp("reads")
    (root / "registry").mkdir()
    (root / "registry" / "reads.yaml").write_text(SMALL_REGISTRY.format(dataset="reads"))
    rng = np.random.default_rng(5)
    location = str(root / "reads")
    for day in DAYS:  # one commit, one file a day, two row groups in each file
        deltalake.write_deltalake(location, _day(day, rng), partition_by=["ds"], mode="append",
                                  writer_properties=WriterProperties(max_row_group_size=ROWS // 2))  # fmt: skip
    return location, load_dataset("reads", root / "registry")


def _read(snapshot, registry, gap: int | None) -> tuple[list[pa.Table], object]:
    dataset = SnapshotDataset(snapshot, registry, COLUMNS, batch_size=700, shuffle_buffer=1400, seed=3,
                              coalescing=Coalescing(gap=gap))  # fmt: skip
    loader = ResumableLoader(dataset, epochs=1)  # not on into a second epoch: every read made is counted here
    try:
        return list(loader), loader.counter
    finally:
        loader.close()


def test_coalescing_merges_chunks_within_the_gap_while_the_waste_stays_small():
    chunks = [(0, 1000), (1050, 1000), (5000, 100), (5100, 100)]
    assert Coalescing(gap=None).ranges(chunks) == [(0, 1000, 0), (1050, 1000, 0), (5000, 100, 0), (5100, 100, 0)]
    assert Coalescing(gap=0).ranges(chunks) == [(0, 1000, 0), (1050, 1000, 0), (5000, 200, 0)]  # touching: one
    assert Coalescing(gap=100).ranges(chunks) == [(0, 2050, 50), (5000, 200, 0)]
    # a 1 MiB gap would take the 2,950 bytes between them, three times the 2,100 bytes asked for: not merged
    assert Coalescing(gap=1 << 20).ranges(chunks) == [(0, 2050, 50), (5000, 200, 0)]
    assert Coalescing(gap=1 << 20, max_waste=2.0).ranges(chunks) == [(0, 5200, 3000)]


def test_every_gap_reads_the_same_tables_in_fewer_requests(table):
    location, registry = table
    snapshot = open_snapshot(location, DAYS)
    assert len(snapshot.files) == 2
    reference, per_chunk = _read(snapshot, registry, None)
    assert sum(t.num_rows for t in reference) == 2 * ROWS
    requests, asked = [per_chunk.requests], per_chunk.bytes_read - per_chunk.bytes_wasted
    assert per_chunk.bytes_wasted == 0
    for gap in (0, 4096, 1 << 20):
        tables, counter = _read(snapshot, registry, gap)
        assert all(a.equals(b) for a, b in zip(tables, reference, strict=True)), gap
        assert counter.bytes_read - counter.bytes_wasted == asked  # the same chunks, plus what lay between
        assert counter.bytes_wasted <= 0.1 * asked
        requests.append(counter.requests)
    assert requests == sorted(requests, reverse=True) and requests[-1] < requests[0], requests
    # per chunk: 2 footer reads per file, then per row group one request per leaf column chunk (5 + 1 label)
    assert requests[0] == 2 * 2 + 4 * 6


@pytest.fixture(scope="module")
def bucket(table, tmp_path_factory) -> Iterator[tuple[str, Path, Store]]:
    """The table copied, byte for byte, into a bucket of moto's S3 server; (endpoint, its log, the store)."""
    location, _registry = table
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with moto_server(log, BUCKET) as endpoint:
        client = s3_client(endpoint)
        for path in Path(location).rglob("*"):
            if path.is_file():
                client.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(location)}")
        yield endpoint, log, Store(warehouse=f"s3://{BUCKET}/warehouse", endpoint=endpoint, **KEYS)


def _parquet_requests(log: Path, method: str) -> int:
    """Requests of ``method`` for data files in moto's log (its lines may carry colour codes)."""
    return len(re.findall(rf'"(?:\x1b\[[0-9;]*m)*{method} /[^ ]+\.parquet HTTP/1\.1(?:\x1b\[0m)?" 20[06]', log.read_text()))


def test_the_reader_reads_a_bucket_as_it_reads_the_folder(table, bucket):
    location, registry = table
    endpoint, log, store = bucket
    local, local_cost = _read(open_snapshot(location, DAYS), registry, 1 << 20)
    snapshot = open_snapshot(f"s3a://{BUCKET}/{PREFIX}", DAYS, store=store)  # Hadoop's name for it too
    assert [f.uri.startswith(f"s3://{BUCKET}/{PREFIX}/ds=") for f in snapshot.files] == [True, True]
    gets, heads = _parquet_requests(log, "GET"), _parquet_requests(log, "HEAD")
    remote, cost = _read(snapshot, registry, 1 << 20)
    assert all(a.equals(b) for a, b in zip(remote, local, strict=True)) and len(remote) == len(local)
    assert (cost.requests, cost.bytes_read) == (local_cost.requests, local_cost.bytes_read)
    # moto saw the ranged reads the reader counted, and one HEAD (the file's size) for each time it opened a file
    assert _parquet_requests(log, "GET") - gets == cost.requests and cost.requests < local_cost.requests + 1
    # (the planning footers' opens are not in files_opened: 2 files, then 4 row groups each opening its file)
    assert _parquet_requests(log, "HEAD") - heads == 2 + len(cost.files_opened) == 2 + 4
    assert "testing" not in repr(store)  # the keys are kept out of every repr


def test_usage_rows_are_appended_to_a_bucket(bucket):
    import deltalake

    endpoint, _log, store = bucket
    uri = f"s3://{BUCKET}/warehouse/featurehouse_catalog.db/feature_usage"
    deltalake.write_deltalake(uri, FEATURE_USAGE_SCHEMA.empty_table(), storage_options=store.delta_options())
    now = dt.datetime.now(dt.UTC)
    record = UsageRecord(job_id="s3-job", dataset="reads", ds_from="2026-11-01", ds_to="2026-11-02",
                         features=["f0"], bytes_read=1, rows_read=2, table_version=0, started_at=now, ended_at=now)  # fmt: skip
    assert record_usage(uri, [record], store=store) == 1
    rows = deltalake.DeltaTable(uri, storage_options=store.delta_options()).to_pyarrow_table().to_pylist()
    assert [(r["job_id"], r["rows_read"]) for r in rows] == [("s3-job", 2)]


def test_an_unreachable_endpoint_or_missing_credentials_is_one_clear_error(monkeypatch):
    nobody = f"http://127.0.0.1:{free_port()}"
    store = Store(warehouse=f"s3://{BUCKET}/warehouse", endpoint=nobody, access_key="AKIA-SECRET", secret_key="s3cr3t")
    with pytest.raises(TableError, match=rf"cannot read .* from s3://{BUCKET}/warehouse at {nobody}: .*check the") as err:
        open_snapshot(f"s3://{BUCKET}/{PREFIX}", DAYS, store=store)
    assert "s3cr3t" not in str(err.value) and "AKIA-SECRET" not in str(err.value) and "\n" not in str(err.value)
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    keyless = Store(warehouse=f"s3://{BUCKET}/warehouse", endpoint=nobody)
    with pytest.raises(ConfigError, match="no S3 credentials for .*set spark.hadoop.fs.s3a.access.key"):
        open_snapshot(f"s3://{BUCKET}/{PREFIX}", DAYS, store=keyless)


def test_a_profile_names_the_bucket_and_how_to_reach_it(tmp_path):
    settings = {"spark.sql.warehouse.dir": "s3a://bkt/warehouse/", "spark.hadoop.fs.s3a.endpoint": "http://h:9000",
                "spark.hadoop.fs.s3a.access.key": "k", "spark.hadoop.fs.s3a.secret.key": "s"}  # fmt: skip
    store = Store.from_settings(settings, home=tmp_path)
    assert (store.warehouse, store.endpoint, store.on_s3) == ("s3://bkt/warehouse", "http://h:9000", True)
    assert store.delta_options()["AWS_ALLOW_HTTP"] == "true" and store.path("s3a://bkt/a/b") == "bkt/a/b"
    assert Store.from_settings({}, home=tmp_path).warehouse == str(tmp_path / "warehouse")
    with pytest.raises(ConfigError, match="only one of"):
        Store.from_settings({k: v for k, v in settings.items() if not k.endswith("secret.key")}, home=tmp_path)
    with pytest.raises(ConfigError, match="reads local folders and s3"):
        Store.from_settings({"spark.sql.warehouse.dir": "hdfs://nn/warehouse"}, home=tmp_path)
