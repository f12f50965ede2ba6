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
    assert capsys.readouterr().out.splitlines()[-1] == "(1 row, truncated: raise --limit)"


def test_sql_errors_are_one_line(spark, spark_home, capsys):
    assert cli.main(["sql", "--home", str(spark_home), "SELECT * FROM featurehouse.no_such_table"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Spark SQL refused the statement: [TABLE_OR_VIEW_NOT_FOUND]")
    assert len(err.splitlines()) == 1
