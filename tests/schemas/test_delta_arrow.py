"""Other engines on a column-mapped feature table that Spark wrote: the recipe, deltalake, Polars, DuckDB, Parquet.

The table is made the way the jobs make it: two days label-joined from the landing zone, then
the first day joined again with one more impression (its old file stays on disk, removed from
the log). Spark is the reference. Where an engine misreads the table today, the test asserts
exactly how, and fails with a note to update docs/engines.md once it reads it right.
"""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from etl import label_join
from schemas.delta_arrow import arrow_dataset, check_plain_readable
from schemas.errors import TableError
from tests.conftest import SMALL_REGISTRY, close_partition, write_landing

pytestmark = pytest.mark.spark

DATASET = "t_engines"
DAY1, DAY2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)


@dataclass(frozen=True)
class Table:
    name: str
    uri: str  # as DESCRIBE DETAIL shows it: file:/...
    before_rerun: int  # the version before DAY1 was joined again
    rows: list[dict]  # what Spark reads at the latest version, canonical (see canonical())
    rows_before_rerun: list[dict]
    registry_dir: Path

    @property
    def path(self) -> Path:
        return Path(self.uri.removeprefix("file:"))


def impressions(ds: dt.date, ids: range) -> list[dict]:
    return [{"impression_id": f"{ds}-{i}", "user_id": i, "item_id": 100 + i, "event_time": f"{ds}T10:00:0{i}Z",
             "dense": {"user_ctr_7d": i / 8, "item_price": 2.5 + i}, "sparse": {"user_topic_ids": list(range(i))},
             "weighted_sparse": {"user_topic_affinity": [{"id": i, "weight": i / 4}, {"id": 9, "weight": 1.0}]}}
            for i in ids]  # fmt: skip


def canonical(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["impression_id"])


def arrow_rows(table: pa.Table) -> list[dict]:
    """The rows of ``table``, sorted; event_time as microseconds since the epoch (engines' Python datetimes differ)."""
    if "event_time" in table.column_names:
        at = table.schema.get_field_index("event_time")
        table = table.set_column(at, "event_time", table.column(at).cast(pa.int64()))
    return canonical(table.to_pylist())


def spark_rows(spark, name: str, *, version: int | None = None) -> list[dict]:
    """What Spark, the writer, reads: the reference, in :func:`arrow_rows`' form."""
    at = "" if version is None else f" VERSION AS OF {int(version)}"
    frame = spark.sql(f"SELECT * FROM {name}{at}").withColumn("event_time", F.unix_micros("event_time"))
    return canonical([r.asDict(recursive=True) for r in frame.collect()])


@pytest.fixture(scope="module")
def table(spark, spark_home, tmp_path_factory) -> Table:
    root = tmp_path_factory.mktemp("engines")
    registry_dir, landing = root / "registry", root / "landing"
    registry_dir.mkdir()
    (registry_dir / f"{DATASET}.yaml").write_text(SMALL_REGISTRY.format(dataset=DATASET))
    for ds, n in ((DAY1, 4), (DAY2, 3)):
        write_landing(landing, "impressions", str(ds), impressions(ds, range(n)))
        write_landing(landing, "labels", str(ds), [{"impression_id": f"{ds}-1", "label_type": "click",
                                                    "event_time": f"{ds}T10:00:30Z"}])  # fmt: skip
    for i in range(6):
        close_partition(landing, "labels", str(DAY1 + dt.timedelta(days=i)))

    def join(ds: dt.date) -> None:
        label_join.run(spark, label_join.LabelJoinConfig(dataset=DATASET, ds=ds, home=spark_home,
                                                         landing=str(landing), registry_dir=registry_dir))  # fmt: skip

    join(DAY1)
    join(DAY2)
    name = f"featurehouse.{DATASET}"
    before = spark.sql(f"DESCRIBE HISTORY {name}").first()["version"]
    write_landing(landing, "impressions", str(DAY1), impressions(DAY1, range(4, 5)), part="part-00001.jsonl")
    join(DAY1)
    uri = spark.sql(f"DESCRIBE DETAIL {name}").first()["location"]
    return Table(name=name, uri=uri, before_rerun=before, rows=spark_rows(spark, name),
                 rows_before_rerun=spark_rows(spark, name, version=before), registry_dir=registry_dir)  # fmt: skip


def test_the_recipe_reads_what_spark_reads(table):
    dataset = arrow_dataset(table.uri)
    assert (len(table.rows), len(table.rows_before_rerun)) == (5 + 3, 4 + 3)  # DAY1 joined again with one more
    assert arrow_rows(dataset.to_table()) == table.rows
    assert dataset.schema.names == list(table.rows[0])  # logical names, the table's order
    assert arrow_rows(arrow_dataset(table.uri, version=table.before_rerun).to_table()) == table.rows_before_rerun
    columns = ["impression_id", "user_topic_affinity", "ds"]
    assert arrow_rows(dataset.to_table(columns, days=[DAY2])) == [
        {c: r[c] for c in columns} for r in table.rows if r["ds"] == str(DAY2)
    ]
    with pytest.raises(TableError, match=r"column\(s\) 'user_ctr' are not in the Delta schema of .* columns there: "):
        dataset.to_reader(["user_ctr"])


def test_deltalake_querybuilder_reads_what_spark_reads(table):
    from deltalake import DeltaTable, QueryBuilder

    got = QueryBuilder().register("t", DeltaTable(table.uri)).execute("SELECT * FROM t").read_all()
    assert arrow_rows(pa.table(got)) == table.rows


@pytest.mark.parametrize("read", ["to_pyarrow_table", "to_pyarrow_dataset", "to_pandas"])
def test_deltalake_to_pyarrow_reads_nulls_from_a_column_mapped_table(table, read):
    """deltalake 1.6.6: every column but the partition column null, the row count and ds right. Flags a fix."""
    import deltalake

    delta = deltalake.DeltaTable(table.uri)
    got = {"to_pyarrow_table": lambda: delta.to_pyarrow_table(),
           "to_pyarrow_dataset": lambda: delta.to_pyarrow_dataset().to_table(),
           "to_pandas": lambda: pa.Table.from_pandas(delta.to_pandas(), preserve_index=False)}[read]()  # fmt: skip
    if got.column("impression_id").null_count == 0:
        assert arrow_rows(got) == table.rows, f"deltalake {deltalake.__version__} {read}() reads this table wrong anew"
        pytest.fail(f"deltalake {deltalake.__version__} DeltaTable.{read}() now reads column-mapped tables right: "
                    "update docs/engines.md, schemas.delta_arrow.column_mapping_message and this test")
    assert got.num_rows == len(table.rows)
    assert sorted(got.column("ds").to_pylist()) == sorted(r["ds"] for r in table.rows)
    assert {c: got.column(c).null_count for c in got.column_names if c != "ds"} == {
        c: len(table.rows) for c in table.rows[0] if c != "ds"
    }


def test_check_plain_readable_names_the_readers_that_read_it_right(table, tmp_path):
    with pytest.raises(TableError, match=r"uses column mapping \(mode name\): .* read it with Spark, deltalake's "
                                         r"QueryBuilder or schemas.delta_arrow.arrow_dataset \(docs/engines.md\)"):
        check_plain_readable(table.uri)
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "plain"), pa.table({"x": [1], "ds": ["2026-11-01"]}), partition_by=["ds"])
    check_plain_readable(str(tmp_path / "plain"))  # no column mapping: nothing to say
    assert arrow_dataset(str(tmp_path / "plain")).to_table().to_pylist() == [{"x": 1, "ds": "2026-11-01"}]


def test_parquet_readers_see_physical_names_and_removed_files(table):
    duckdb = pytest.importorskip("duckdb")
    files = sorted(str(p) for p in table.path.rglob("*.parquet") if "_delta_log" not in p.parts)
    plain = pa.concat_tables(pq.read_table(f) for f in files)
    assert plain.num_rows == 4 + 3 + 5  # DAY1's first file too: removed from the log, not yet vacuumed
    assert all(name.startswith("col-") for name in plain.column_names)
    names = [row[0] for row in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet({files!r})").fetchall()]
    assert len(names) == len(table.rows[0]) and all(name.startswith("col-") for name in names)
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet({files!r})").fetchall() == [(12,)]


def test_polars_and_duckdb_read_the_recipe_right(table):
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    dataset = arrow_dataset(table.uri)
    columns = ["impression_id", "label_click", "user_ctr_7d", "user_topic_ids", "user_topic_affinity", "ds"]
    expected = [{c: r[c] for c in columns} for r in table.rows]
    assert pl.from_arrow(dataset.to_reader(columns)).sort("impression_id").to_dicts() == expected
    assert pl.DataFrame(dataset).height == len(table.rows)  # the Arrow stream of every column
    con = duckdb.connect()
    con.register("ads", dataset)  # scanned anew by each query
    got = con.sql(f"SELECT {', '.join(columns)} FROM ads ORDER BY impression_id").fetchall()
    assert [dict(zip(columns, row, strict=True)) for row in got] == expected
    clicks = con.sql("SELECT ds, sum(label_click) FROM ads GROUP BY ds ORDER BY ds").fetchall()
    assert clicks == [(str(DAY1), 1), (str(DAY2), 1)]


def test_polars_refuses_a_column_mapped_table(table):
    pl = pytest.importorskip("polars")
    try:
        got = pl.read_delta(str(table.path))
    except Exception as err:  # polars raises deltalake's DeltaProtocolError
        assert "requires reader version 2 (column mapping), which polars does not support" in str(err), err
        return
    assert arrow_rows(got.to_arrow()) == table.rows, f"polars {pl.__version__} read_delta reads this table wrong"
    pytest.fail(f"polars {pl.__version__} read_delta now reads column-mapped tables: update docs/engines.md, this test")


def test_a_table_with_deletion_vectors_is_refused(spark, table, tmp_path):
    from deltalake import DeltaTable, QueryBuilder

    copy = tmp_path / "with_dv"
    shutil.copytree(table.path, copy)
    spark.sql(f"ALTER TABLE delta.`{copy}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{copy}` WHERE impression_id = '{DAY2}-0'")
    with pytest.raises(TableError, match=r"needs reader features deletionVectors that arrow_dataset does not honour"):
        arrow_dataset(str(copy))
    got = QueryBuilder().register("t", DeltaTable(str(copy))).execute("SELECT impression_id FROM t").read_all()
    assert sorted(pa.table(got).column(0).to_pylist()) == [r["impression_id"] for r in table.rows
                                                           if r["impression_id"] != f"{DAY2}-0"]  # fmt: skip


def test_a_column_added_after_the_files_were_written_reads_null_as_in_spark(spark, table, tmp_path):
    copy = tmp_path / "added"
    shutil.copytree(table.path, copy)
    added = "late_ctr FLOAT, late_pairs ARRAY<STRUCT<id: BIGINT, w: FLOAT>>"
    spark.sql(f"ALTER TABLE delta.`{copy}` ADD COLUMNS ({added})")
    expected = spark_rows(spark, f"delta.`{copy}`")
    assert expected == [{**r, "late_ctr": None, "late_pairs": None} for r in table.rows]
    assert arrow_rows(arrow_dataset(str(copy)).to_table()) == expected


def test_the_project_reader_reads_weighted_sparse_fields_under_their_names(table):
    """Column mapping names a weighted sparse column's struct fields too (col-<uuid>); the reader renames them."""
    from ingest.projected_reads import IoCounter, read_row_groups
    from ingest.snapshot import open_snapshot
    from schemas.registry import load_dataset

    snapshot = open_snapshot(table.uri, [DAY1, DAY2])
    registry = load_dataset(DATASET, table.registry_dir)
    columns = ["impression_id", "user_topic_affinity"]
    parts = [read_row_groups(f, snapshot, registry, columns, IoCounter()) for f in snapshot.files]
    assert canonical(pa.concat_tables(parts).to_pylist()) == [{c: r[c] for c in columns} for r in table.rows]
