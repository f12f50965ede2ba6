"""The label join on hand-written fixtures with exact expected rows (real Spark, Delta, metastore)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from etl import label_join
from schemas.errors import LandingError
from tests.conftest import close_partition, dataset_name, write_landing

pytestmark = pytest.mark.spark

DAY1, DAY2 = "2026-11-01", "2026-11-02"


def imp(impression_id: str, time: str, **extra) -> dict:
    record = {
        "impression_id": impression_id,
        "user_id": 1,
        "item_id": 2,
        "event_time": time,
        "dense": {"user_ctr_7d": 0.5, "item_price": 9.99},
        "sparse": {"user_topic_ids": [3, 4]},
        "weighted_sparse": {"user_topic_affinity": [{"id": 3, "weight": 0.25}]},
    }
    record.update(extra)
    return record


def lab(impression_id: str, label_type: str, time: str) -> dict:
    return {"impression_id": impression_id, "label_type": label_type, "event_time": time}


def close_label_days(landing: Path, first: str, count: int) -> None:
    start = dt.date.fromisoformat(first)
    for i in range(count):
        close_partition(landing, "labels", (start + dt.timedelta(days=i)).isoformat())


def join(spark, request, tmp_path: Path, registry_dir: Path, ds: str = DAY1, **kwargs) -> label_join.LabelJoinSummary:
    config = label_join.LabelJoinConfig(
        dataset=dataset_name(request),
        ds=dt.date.fromisoformat(ds),
        home=tmp_path,
        landing=str(tmp_path / "landing"),
        registry_dir=registry_dir,
        **kwargs,
    )
    return label_join.run(spark, config)


def labels_by_id(spark, table: str, ds: str = DAY1) -> dict[str, tuple[int, int]]:
    rows = spark.table(table).where(f"ds = '{ds}'").select("impression_id", "label_click", "label_conversion").collect()
    return {r.impression_id: (r.label_click, r.label_conversion) for r in rows}


def test_attribution_windows_are_exact_to_the_second(spark, request, tmp_path, registry_dir):
    landing = tmp_path / "landing"
    write_landing(
        landing,
        "impressions",
        DAY1,
        [
            imp("inside", "2026-11-01T10:00:00.000Z"),
            imp("outside", "2026-11-01T10:00:00.000Z"),
            imp("boundary", "2026-11-01T10:00:00.000Z"),
            imp("midnight", "2026-11-01T23:50:00.000Z"),
            imp("conv_late_ok", "2026-11-01T12:00:00.000Z"),
            imp("click_2d_late", "2026-11-01T12:00:00.000Z"),
            imp("before", "2026-11-01T12:00:00.000Z"),
            imp("negative", "2026-11-01T12:00:00.000Z"),
        ],
    )
    write_landing(
        landing,
        "labels",
        DAY1,
        [
            lab("inside", "click", "2026-11-01T10:59:59.000Z"),  # 1h - 1s: counts
            lab("outside", "click", "2026-11-01T11:00:01.000Z"),  # 1h + 1s: does not
            lab("boundary", "click", "2026-11-01T11:00:00.000Z"),  # exactly 1h: counts (window is inclusive)
            lab("before", "click", "2026-11-01T11:59:59.000Z"),  # before its impression: does not
        ],
    )
    write_landing(landing, "labels", DAY2, [lab("midnight", "click", "2026-11-02T00:10:00.000Z")])  # next ds: counts
    write_landing(
        landing,
        "labels",
        "2026-11-03",
        [
            lab("conv_late_ok", "conversion", "2026-11-03T12:00:00.000Z"),  # 2 days: inside the 3d window
            lab("click_2d_late", "click", "2026-11-03T12:00:00.000Z"),  # 2 days: outside the 1h window
        ],
    )
    close_label_days(landing, DAY1, 4)

    summary = join(spark, request, tmp_path, registry_dir)

    assert labels_by_id(spark, summary.table) == {
        "inside": (1, 0),
        "outside": (0, 0),
        "boundary": (1, 0),
        "midnight": (1, 0),
        "conv_late_ok": (0, 1),
        "click_2d_late": (0, 0),
        "before": (0, 0),
        "negative": (0, 0),
    }
    assert summary.rows_out == 8
    assert summary.positives == {"click": 3, "conversion": 1}
    assert summary.labels_outside_window == {"click": 3, "conversion": 0}
    assert summary.label_days == (DAY1, DAY2, "2026-11-03", "2026-11-04")
    assert summary.window_open is False


def test_duplicates_collapse_and_orphans_are_counted(spark, request, tmp_path, registry_dir):
    landing = tmp_path / "landing"
    write_landing(
        landing,
        "impressions",
        DAY1,
        [imp("a", "2026-11-01T08:00:00.000Z"), imp("a", "2026-11-01T08:00:00.000Z"), imp("b", "2026-11-01T09:00:00Z")],
    )
    write_landing(landing, "impressions", DAY1, [imp("a", "2026-11-01T08:00:00.000Z")], hour="08", part="dup.jsonl")
    write_landing(
        landing,
        "labels",
        DAY1,
        [
            lab("a", "click", "2026-11-01T08:00:30.000Z"),
            lab("a", "click", "2026-11-01T08:00:30.000Z"),
            lab("ghost", "click", "2026-11-01T08:00:30.000Z"),
            lab("ghost2", "conversion", "2026-11-01T09:00:30.000Z"),
        ],
    )
    close_label_days(landing, DAY1, 4)

    summary = join(spark, request, tmp_path, registry_dir, explain_jobs=True)

    assert labels_by_id(spark, summary.table) == {"a": (1, 0), "b": (0, 0)}
    assert spark.table(summary.table).count() == 2
    # --explain-jobs: every job of the run, by call site, ours and Delta's among them
    head, *sites = summary.job_list
    assert head.startswith(f"{summary.spark_jobs} Spark jobs: ") and summary.spark_jobs > 0
    assert sum(int(line.split(" x ")[0]) for line in sites) == summary.spark_jobs
    assert any("etl/label_join.py:" in line and "[featurehouse," in line for line in sites), sites
    assert any("[delta," in line for line in sites), sites
    assert summary.format().endswith("\n".join(f"  {line}" for line in summary.job_list))
    assert summary.impressions_read == 4
    assert summary.duplicate_impressions == 2
    assert summary.labels_matched == 2
    assert summary.duplicate_labels == 1
    assert summary.orphan_labels == 2


def test_features_are_flattened_into_typed_columns(spark, request, tmp_path, registry_dir):
    landing = tmp_path / "landing"
    write_landing(
        landing,
        "impressions",
        DAY1,
        [
            imp("full", "2026-11-01T08:00:00.000Z"),
            {
                "impression_id": "sparse_only",
                "user_id": 5,
                "item_id": 6,
                "event_time": "2026-11-01T09:00:00.000Z",
                "dense": {"mystery_feature": 1.0, "user_ctr_7d": None},
                "sparse": {"user_topic_ids": [], "other_ids": [1, 2]},
            },
            '{"impression_id": "broken", "event_time": ',
        ],
    )
    close_label_days(landing, DAY1, 4)

    summary = join(spark, request, tmp_path, registry_dir, max_bad_fraction=0.5)  # 1 of 3 lines is broken

    table = spark.table(summary.table)
    assert table.columns == [
        "impression_id", "user_id", "item_id", "event_time", "label_click", "label_conversion",
        "user_ctr_7d", "item_price", "user_topic_ids", "user_topic_affinity", "ds",
    ]
    expected = spark.createDataFrame(
        [
            ("full", 1, 2, 0.5, 9.99, [3, 4], [(3, 0.25)]),
            ("sparse_only", 5, 6, None, None, [], None),
        ],
        "impression_id string, user_id bigint, item_id bigint, user_ctr_7d float, item_price double, "
        "user_topic_ids array<bigint>, user_topic_affinity array<struct<id: bigint, weight: float>>",
    )
    assertDataFrameEqual(table.select(*expected.columns), expected)
    assert summary.unknown_features == ("mystery_feature", "other_ids")
    assert summary.unknown_feature_values == 2
    assert summary.quarantined_impressions == 1


def test_rerun_keeps_one_copy_and_other_days_untouched(spark, request, tmp_path, registry_dir):
    landing = tmp_path / "landing"
    for ds in (DAY1, DAY2):
        write_landing(landing, "impressions", ds, [imp(f"{ds}-{i}", f"{ds}T0{i}:00:00.000Z") for i in range(5)])
        write_landing(landing, "labels", ds, [lab(f"{ds}-1", "click", f"{ds}T01:00:05.000Z")])
    close_label_days(landing, DAY1, 5)

    first = join(spark, request, tmp_path, registry_dir, ds=DAY1)
    table = spark.table(first.table)
    day1 = lambda: spark.table(first.table).where(f"ds = '{DAY1}'")  # noqa: E731
    rows_before = day1().collect()
    files_before = set(day1().inputFiles())

    second = join(spark, request, tmp_path, registry_dir, ds=DAY2)
    assert set(day1().inputFiles()) == files_before, "writing ds 2 touched ds 1's files"
    assert second.rows_out == 5

    rerun = join(spark, request, tmp_path, registry_dir, ds=DAY1)
    assertDataFrameEqual(day1(), rows_before)
    assert day1().count() == 5 and table.count() == 10
    assert len(set(day1().inputFiles())) == len(files_before)
    assert rerun.commit.removed_files == len(files_before)
    assert rerun.commit.version == second.commit.version + 1


def test_refuses_missing_and_open_partitions(spark, request, tmp_path, registry_dir):
    landing = tmp_path / "landing"
    with pytest.raises(LandingError, match=r"impression partition .*impressions/ds=2026-11-01 does not exist"):
        join(spark, request, tmp_path, registry_dir)

    write_landing(landing, "impressions", DAY1, [imp("a", "2026-11-01T23:59:00.000Z")])
    write_landing(landing, "labels", DAY2, [lab("a", "click", "2026-11-02T00:00:30.000Z")])
    close_partition(landing, "labels", DAY1)  # ds 3 and 4 (the 3d conversion window) are missing
    with pytest.raises(LandingError, match=r"2 of them are not closed yet .*labels/ds=2026-11-03.*--allow-open-window"):
        join(spark, request, tmp_path, registry_dir)

    summary = join(spark, request, tmp_path, registry_dir, allow_open_window=True)
    assert summary.window_open is True
    assert labels_by_id(spark, summary.table) == {"a": (1, 0)}


def test_table_is_partitioned_delta_in_the_metastore(spark, spark_home, request, tmp_path, registry_dir):
    landing = tmp_path / "landing"
    write_landing(landing, "impressions", DAY1, [imp("a", "2026-11-01T08:00:00.000Z")])
    close_label_days(landing, DAY1, 4)
    summary = join(spark, request, tmp_path, registry_dir)

    assert spark.catalog.tableExists(summary.table)
    detail = spark.sql(f"DESCRIBE DETAIL {summary.table}").first()
    assert detail.format == "delta"
    assert detail.partitionColumns == ["ds"]
    assert detail.location == f"file:{spark_home}/warehouse/featurehouse.db/{dataset_name(request)}"
    partitions = [r[0] for r in spark.sql(f"SELECT DISTINCT ds FROM {summary.table}").collect()]
    assert partitions == [DAY1]



def test_the_join_writes_the_statistics_catalog_stats_recomputes(spark, request, tmp_path, registry_dir):
    """A published ds has its ``feature_stats`` rows from the join's own rows: ``catalog stats`` of the same
    partition gives the same exact columns (counts, nulls, min, max, list lengths; sums to float rounding) and
    the approximate ones within their error. ``--no-stats`` writes none, and a rerun replaces the ds's rows."""
    import random

    from pyspark.sql import functions as F

    from schemas.catalog import DENSE_QUANTILES, FEATURE_STATS, LENGTH_QUANTILES, catalog_table
    from schemas.registry import load_dataset
    from warehouse.stats import DISTINCT_RSD, compute_partition_stats

    rng = random.Random(11)
    maybe = lambda value: None if rng.random() < 0.15 else value  # noqa: E731
    landing = tmp_path / "landing"
    for ds in (DAY1, DAY2):  # seeded: ~15% nulls, repeated dense values, empty lists, ids from a few hundred
        write_landing(landing, "impressions", ds, [
            imp(f"{ds}-{i}", f"{ds}T{i % 24:02d}:{i % 60:02d}:00.000Z",
                dense={"user_ctr_7d": maybe(rng.choice([0.0, 0.25, rng.gauss(0.03, 0.02)])),
                       "item_price": maybe(round(rng.lognormvariate(3, 1), 2))},
                sparse={"user_topic_ids": maybe([rng.randrange(300) for _ in range(rng.choice([0, 1, 2, 5]))])},
                weighted_sparse={"user_topic_affinity": maybe([{"id": rng.randrange(200), "weight": rng.random()}
                                                               for _ in range(rng.choice([0, 1, 3]))])})
            for i in range(400)
        ])  # fmt: skip
    close_label_days(landing, DAY1, 5)

    summary = join(spark, request, tmp_path, registry_dir)
    assert summary.stats is not None and summary.stats.table_version == summary.commit.version
    assert f"statistics         4 features -> {catalog_table(FEATURE_STATS)}" in summary.format()
    stats = spark.table(catalog_table(FEATURE_STATS)).where(F.col("dataset") == summary.dataset)
    written = {r["feature"]: r.asDict() for r in stats.where(F.col("ds") == DAY1).collect()}
    recomputed = compute_partition_stats(spark, load_dataset(summary.dataset, registry_dir),
                                         dt.date.fromisoformat(DAY1)).by_feature()
    assert set(written) == set(recomputed) == {"user_ctr_7d", "item_price", "user_topic_ids", "user_topic_affinity"}
    exact = ("dataset", "ds", "kind", "table_version", "rows", "non_null", "coverage", "min", "max", "bytes_on_disk")
    sums = ("mean", "stddev", "len_mean")
    approximate = [name for name, _ in DENSE_QUANTILES + LENGTH_QUANTILES]
    for feature, row in written.items():
        other = recomputed[feature]
        assert {c: row[c] for c in exact} == {c: other[c] for c in exact}, feature
        assert row["rows"] == 400 and 0 < row["non_null"] < 400, row
        for column in sums:
            assert row[column] == (None if other[column] is None else pytest.approx(other[column], rel=1e-9)), column
        # percentile_approx keeps every value up to accuracy / 2 (5,000) of them: here it is exact
        assert {c: row[c] for c in approximate} == {c: other[c] for c in approximate}, feature
        if row["kind"] != "dense":
            assert abs(row["approx_distinct_ids"] - other["approx_distinct_ids"]) <= \
                DISTINCT_RSD * 3 * other["approx_distinct_ids"]  # fmt: skip

    unstated = join(spark, request, tmp_path, registry_dir, ds=DAY2, stats=False)
    assert unstated.published and unstated.stats is None
    assert "statistics         not computed (--no-stats)" in unstated.format()
    assert stats.where(F.col("ds") == DAY2).count() == 0

    rerun = join(spark, request, tmp_path, registry_dir)
    again = stats.where(F.col("ds") == DAY1).collect()
    assert len(again) == 4 and {r["table_version"] for r in again} == {rerun.commit.version}


def test_small_and_large_day_settings_publish_the_same_day(spark, request, tmp_path, registry_dir):
    """A small day's plans run interpreted and without AQE (warehouse/confs.py); a user's settings keep them compiled
    and adaptive, as a large day's are. Both give the same rows, quarantine and counts, on a day with a broken line,
    a non-finite value, nulls and unknown names."""
    from warehouse.confs import SMALL_INPUT_CONFS, input_size_confs

    landing = tmp_path / "landing"
    write_landing(landing, "impressions", DAY1, [
        imp("a", "2026-11-01T08:00:00.000Z"),
        imp("b", "2026-11-01T09:00:00.000Z", dense={"user_ctr_7d": None, "item_price": 1.5, "mystery": 2.0}),
        imp("c", "2026-11-01T10:00:00.000Z", dense={"user_ctr_7d": "Infinity", "item_price": 1.0}),
        imp("d", "2026-11-02T10:00:00.000Z"),  # outside the ds
        '{"impression_id": "broken", "event_time": ',
    ])  # fmt: skip
    write_landing(landing, "labels", DAY1, [lab("a", "click", "2026-11-01T08:00:05.000Z")])
    close_label_days(landing, DAY1, 4)
    assert input_size_confs(0) == SMALL_INPUT_CONFS and input_size_confs(2**40) == {}

    def published() -> tuple:
        summary = join(spark, request, tmp_path, registry_dir, max_bad_fraction=0.9, stats=False)
        rows = spark.table(summary.table).where(f"ds = '{DAY1}'").orderBy("impression_id").collect()
        quarantine = spark.table(summary.quarantine_table).where(f"ds = '{DAY1}'").select("problem", "line") \
            .orderBy("line").collect()  # fmt: skip
        counts = (summary.rows_out, summary.quarantined_impressions, summary.positives, summary.unknown_features,
                  summary.unknown_feature_values, summary.problems)  # fmt: skip
        return rows, quarantine, counts

    compiled = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "CODEGEN_ONLY",
                "spark.sql.adaptive.enabled": "true"}
    assert compiled.keys() == SMALL_INPUT_CONFS.keys()
    for key, value in compiled.items():
        spark.conf.set(key, value)  # as a user's --conf: kept by the join
    try:
        with_code = published()
    finally:
        for key in compiled:
            spark.conf.unset(key)
    interpreted = published()
    assert interpreted == with_code
    rows, quarantine, counts = interpreted
    assert [r.impression_id for r in rows] == ["a", "b"] and rows[0].label_click == 1
    assert counts[:2] == (2, 3) and counts[3:5] == (("mystery",), 1)
    assert sorted(q.problem for q in quarantine) == ["not_finite", "not_json", "outside_ds"]
