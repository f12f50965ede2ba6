"""``featurehouse sql`` against the metastore the jobs write to (in-process, the shared session)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from etl import label_join
from featurehouse import cli
from tests.conftest import close_partition, dataset_name, write_landing

pytestmark = pytest.mark.spark


def test_sql_counts_match_the_joined_rows(spark, spark_home, request, tmp_path, registry_dir, capsys):
    landing = tmp_path / "landing"
    for ds, n in (("2026-11-01", 3), ("2026-11-02", 2)):
        write_landing(
            landing, "impressions", ds,
            [{"impression_id": f"{ds}-{i}", "event_time": f"{ds}T10:00:0{i}Z", "dense": {"user_ctr_7d": 0.1}}
             for i in range(n)],
        )
        write_landing(landing, "labels", ds, [{"impression_id": f"{ds}-0", "label_type": "click",
                                                "event_time": f"{ds}T10:00:30Z"}])
    for i in range(6):
        close_partition(landing, "labels", (dt.date(2026, 11, 1) + dt.timedelta(days=i)).isoformat())
    dataset = dataset_name(request)
    for ds in ("2026-11-01", "2026-11-02"):
        label_join.run(spark, label_join.LabelJoinConfig(
            dataset=dataset, ds=dt.date.fromisoformat(ds), home=spark_home, landing=str(landing),
            registry_dir=registry_dir))
    capsys.readouterr()

    query = f"SELECT ds, count(*) AS n, sum(label_click) AS clicks FROM featurehouse.{dataset} GROUP BY ds ORDER BY ds"
    assert cli.main(["sql", "--home", str(spark_home), "--format", "json", query]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"ds": "2026-11-01", "n": 3, "clicks": 1},
        {"ds": "2026-11-02", "n": 2, "clicks": 1},
    ]

    assert cli.main(["sql", "--home", str(spark_home), query]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["ds", "n", "clicks"]
    assert table[2].split() == ["2026-11-01", "3", "1"]
    assert table[-1] == "(2 rows)"

    assert cli.main(["sql", "--home", str(spark_home), "--limit", "1", query]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "(1 of 2 rows, truncated: raise --limit or pass --all)"
    assert err.splitlines() == [
        "featurehouse sql: printed 1 of 2 rows (--limit 1); pass --limit N or --all for every row"
    ]

    # the location DESCRIBE DETAIL shows is where other engines go: stderr says how to read its files
    detail_query = f"DESCRIBE DETAIL featurehouse.{dataset}"
    assert cli.main(["sql", "--home", str(spark_home), "--format", "json", detail_query]) == 0
    out, err = capsys.readouterr()
    (detail,) = json.loads(out)
    assert detail["properties"]["delta.columnMapping.mode"] == "name"
    assert err.splitlines() == [f"featurehouse sql: Delta table {detail['location']} uses column mapping (mode name): "
                                "its Parquet files name columns col-<uuid>, so deltalake's "
                                "DeltaTable.to_pyarrow_table()/to_pyarrow_dataset() read every column but the "
                                "partition column as null and plain "
                                "Parquet readers see col-<uuid> names; read it with Spark, deltalake's QueryBuilder or "
                                "schemas.delta_arrow.arrow_dataset (docs/engines.md)"]  # fmt: skip


def test_a_cut_result_says_so_on_stderr_and_all_prints_every_row(spark, spark_home, capsys):
    query = "SELECT id FROM range(2500) ORDER BY id"
    sql = ["sql", "--home", str(spark_home), "--format", "json"]
    assert cli.main([*sql, query]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"id": i} for i in range(1000)]
    assert err.splitlines() == [
        "featurehouse sql: printed 1,000 of 2,500 rows (--limit 1000); pass --limit N or --all for every row"
    ]

    assert cli.main([*sql, "--all", query]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [{"id": i} for i in range(2500)]
    assert err == ""

    assert cli.main([*sql, "--limit", "2500", query]) == 0  # exactly all: nothing cut, nothing said
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 2500 and err == ""

    with pytest.raises(SystemExit):
        cli.main([*sql, "--all", "--limit", "5", query])
    assert "argument --limit: not allowed with argument --all" in capsys.readouterr().err


def test_sql_config_is_validated(tmp_path):
    from schemas.errors import ConfigError
    from warehouse.sql import SqlConfig, parse_args

    with pytest.raises(ConfigError, match=r"--limit 0 must be a positive number of rows; pass --all for every row"):
        SqlConfig(statement="SELECT 1", home=tmp_path, limit=0)
    assert SqlConfig(statement="SELECT 1", home=tmp_path, limit=None).limit is None
    assert parse_args(["--home", str(tmp_path), "SELECT 1"]).limit == 1000
    assert parse_args(["--home", str(tmp_path), "--all", "SELECT 1"]).limit is None
    assert parse_args(["--home", str(tmp_path), "--limit", "7", "SELECT 1"]).limit == 7


def test_sql_errors_are_one_line(spark, spark_home, capsys):
    assert cli.main(["sql", "--home", str(spark_home), "SELECT * FROM featurehouse.no_such_table"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Spark SQL refused the statement: [TABLE_OR_VIEW_NOT_FOUND]")
    assert len(err.splitlines()) == 1


READS = [
    "SELECT 1", "WITH a AS (SELECT 1 AS x) SELECT * FROM a", "VALUES (1)", "SHOW TABLES IN featurehouse",
    "DESCRIBE TABLE featurehouse_catalog.features", "EXPLAIN SELECT 1", "DESCRIBE HISTORY featurehouse_catalog.features",
    "DESCRIBE HISTORY featurehouse_catalog.features LIMIT 1", "desc detail featurehouse_catalog.features",
    "SELECT 1 UNION SELECT 2", "SELECT * FROM featurehouse_catalog.features TABLESAMPLE (50 PERCENT)", "TABLE featurehouse_catalog.features",
]
WRITES = {
    "INSERT INTO t VALUES (1)": "InsertIntoStatement",
    "WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a": "InsertIntoStatement",
    "INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT 1": "InsertIntoDir",
    "CREATE TABLE t (a INT) USING delta": "CreateTable",
    "CREATE TABLE t2 AS SELECT 1": "CreateTableAsSelect",
    "a; DROP TABLE b": None,  # not even one statement: a parse error, nothing runs
    "DROP TABLE featurehouse_catalog.features": "DropTable",
    "DELETE FROM t WHERE a = 1": "DeleteFromTable",
    "UPDATE t SET a = 2": "UpdateTable",
    "MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE": "MergeIntoTable",
    "ALTER TABLE t ADD COLUMNS (b INT)": "AddColumns",
    "RESTORE TABLE t TO VERSION AS OF 1": "RESTORE",
    "VACUUM t": "VACUUM",
    "-- a comment first\n/* and another */ OPTIMIZE t": "OPTIMIZE",
    "CACHE TABLE t": "CacheTable",
    "USE featurehouse": "SetCatalogAndNamespace",
    "SET spark.sql.ansi.enabled=false": "SetCommand",
}


def test_reads_pass_the_read_only_check_and_writes_are_named(spark):
    from warehouse.sql import write_in

    assert [write_in(spark, s) for s in READS] == [None] * len(READS)
    for statement, node in WRITES.items():
        if node is None:
            with pytest.raises(Exception, match="Spark SQL refused the statement"):
                write_in(spark, statement)
        else:
            assert write_in(spark, statement) == node, statement


def test_a_write_through_featurehouse_sql_is_refused_without_the_flag(spark, spark_home, capsys):
    from warehouse.catalog import ensure_catalog

    ensure_catalog(spark)
    table = "featurehouse_catalog.features"
    before = spark.sql(f"DESCRIBE HISTORY {table}").count()
    statement = f"ALTER TABLE {table} SET TBLPROPERTIES ('featurehouse.test' = 'x')"
    assert cli.main(["sql", "--home", str(spark_home), statement]) == 2
    assert "error: featurehouse sql is read-only and this statement is a write (SetTableProperties); pass " \
           "--allow-write" in capsys.readouterr().err
    assert spark.sql(f"DESCRIBE HISTORY {table}").count() == before  # nothing committed
    assert cli.main(["sql", "--home", str(spark_home), "--allow-write", statement]) == 0
    assert spark.sql(f"DESCRIBE HISTORY {table}").count() == before + 1
