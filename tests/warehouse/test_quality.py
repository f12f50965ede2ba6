"""The quality suite generated from the registry, run by Great Expectations on Spark DataFrames: a good
partition passes, each planted fault fails the expectation that names it, and the history bounds rows and rates."""

from __future__ import annotations

import datetime as dt

import pytest

from schemas.registry import parse_registry
from warehouse.quality import History, expectations, trailing_history, validate

pytestmark = pytest.mark.spark

DS = dt.date(2026, 11, 8)
REGISTRY = parse_registry({
    "dataset": "q", "labels": [{"name": "click", "window": "1h"}],
    "quality": {"min_coverage": 0.5, "row_count_tolerance": 0.5, "positive_rate_tolerance": 0.5,
                "min_expected_positives": 5},
    "features": [
        {"name": "ctr", "kind": "dense", "dtype": "float32", "description": "d", "owner": "o",
         "quality": {"range": [0, 1], "min_coverage": 0.9}},
        {"name": "topics", "kind": "sparse", "dtype": "int64", "description": "s", "owner": "o",
         "quality": {"max_length": 3}},
        {"name": "later", "kind": "dense", "dtype": "float32", "description": "not filled yet", "owner": "o",
         "lifecycle": {"status": "active", "added_ds": "2026-12-01"}},
    ],
}, source="inline")  # fmt: skip
SCHEMA = "impression_id string, label_click int, ctr float, topics array<bigint>, later float"


def rows(n: int) -> list[tuple]:
    return [(f"i{i}", int(i % 10 == 0), 0.1, [1, 2], None) for i in range(n)]


def planted_faults() -> list[tuple]:
    bad = rows(100)
    bad[1] = ("i0", 0, 0.1, [1], None)  # a duplicate key
    bad[2] = (None, 0, 0.1, [1], None)  # no key
    bad[3] = ("i3", 2, 0.1, [1], None)  # a label that is not 0 or 1
    bad[4] = ("i4", 0, 7.5, [1], None)  # outside the declared range
    bad[5] = ("i5", 0, 0.1, [1, 2, 3, 4, 5], None)  # longer than max_length
    for i in range(6, 26):
        bad[i] = (f"i{i}", 0, None, [1], None)  # ctr coverage 79% < 90%
    return bad


def test_a_good_partition_passes_and_planted_faults_fail_by_name(spark):
    history = History(days=("2026-11-07",), rows=100.0, rates={"label_click": 0.1})
    good = validate(spark.createDataFrame(rows(100), SCHEMA), REGISTRY, DS, history)
    assert good.success and not good.failures
    assert len(good.checks) == 9  # key x2, label set, rate, rows, ctr coverage + range, topics coverage + length
    assert good.summary_lines() == ["q ds=2026-11-08: 9 of 9 expectations passed (history 2026-11-07 .. 2026-11-07)"]

    report = validate(spark.createDataFrame(planted_faults(), SCHEMA), REGISTRY, DS, history)
    failed = {(c.expectation, c.column) for c in report.failures}
    assert failed == {
        ("expect_column_values_to_be_unique", "impression_id"),
        ("expect_column_values_to_not_be_null", "impression_id"),
        ("expect_column_values_to_be_in_set", "label_click"),
        ("expect_column_values_to_be_between", "ctr"),
        ("expect_column_max_to_be_between", "__length_of_topics"),
        ("expect_column_values_to_not_be_null", "ctr"),
    }
    lines = report.summary_lines()
    assert "FAILED expect_column_values_to_be_between ctr (declared range): 1 of 80 non-null values unexpected " \
           "(1.25%), e.g. [7.5]" in lines
    assert "FAILED expect_column_max_to_be_between __length_of_topics (lists of topics at most 3 long): observed 5" in lines
    assert lines[-1] == "q ds=2026-11-08: 3 of 9 expectations passed (history 2026-11-07 .. 2026-11-07)"
    assert '"expect_column_values_to_be_in_set"' in report.as_json()


@pytest.mark.parametrize("history", [History(days=("2026-11-07",), rows=100.0, rates={"label_click": 0.1}),
                                     History(days=("2026-11-07",), rows=20.0, rates={"label_click": 0.5}), History()])
def test_the_one_pass_verdicts_are_the_ones_great_expectations_reaches_itself(spark, history):
    """The gate computes the metrics in one pass and lets each expectation judge them; Great Expectations
    computing every metric itself on Spark must reach the same verdict on every expectation."""
    import great_expectations as gx
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(planted_faults(), SCHEMA)
    report = validate(frame, REGISTRY, DS, history)
    context = gx.get_context(mode="ephemeral")
    suite = gx.ExpectationSuite(name="cross_check")
    for expectation in expectations(REGISTRY, DS, history):
        suite.add_expectation(expectation)
    batch = (context.data_sources.add_spark(name="cross").add_dataframe_asset(name="q")
             .add_batch_definition_whole_dataframe("all").get_batch(
                 batch_parameters={"dataframe": frame.withColumn("__length_of_topics", F.size("topics"))}))  # fmt: skip
    theirs = {(r.expectation_config.type, r.expectation_config.kwargs.get("column")): r.success
              for r in batch.validate(suite).results}  # fmt: skip
    ours = {(c.expectation, c.column): c.success for c in report.checks}
    assert ours == theirs
    assert report.rows == 100 and report.label_sums == {"label_click": sum(r[1] for r in planted_faults())}


def test_rows_and_rates_are_bounded_by_the_history_and_unbounded_without_one(spark):
    frame = spark.createDataFrame([(f"i{i}", 1, 0.1, [1], None) for i in range(30)], SCHEMA)  # 30 rows, rate 1.0
    report = validate(frame, REGISTRY, DS, History(days=("2026-11-07",), rows=100.0, rates={"label_click": 0.1}))
    assert {(c.expectation, c.observed) for c in report.failures} == {
        ("expect_column_mean_to_be_between", "observed 1.0"),
        ("expect_table_row_count_to_be_between", "observed 30"),
    }
    first_day = validate(frame, REGISTRY, DS, History())
    assert first_day.success and first_day.summary_lines()[-1].endswith("(no history)")


def test_the_history_is_the_published_partitions_before_ds(spark, request):
    table = f"default.{request.node.name[:40]}"
    spark.createDataFrame(
        [(f"{d}-{i}", int(i < k), d) for d, n, k in (("2026-11-05", 10, 1), ("2026-11-06", 30, 9), ("2026-11-08", 5, 5))
         for i in range(n)], "impression_id string, label_click int, ds string",
    ).write.format("delta").partitionBy("ds").saveAsTable(table)  # fmt: skip
    history = trailing_history(spark, table, REGISTRY, DS)
    assert history.days == ("2026-11-05", "2026-11-06")  # not ds itself
    assert history.rows == 20.0 and history.rates == {"label_click": pytest.approx((0.1 + 0.3) / 2)}
    assert trailing_history(spark, "default.no_such_table", REGISTRY, DS) == History()


def test_a_rate_bound_needs_enough_expected_positives_to_mean_anything():
    history = History(days=("2026-11-07",), rows=100.0, rates={"label_click": 0.1})  # 10 positives a day
    strict = REGISTRY.model_copy(update={"quality": REGISTRY.quality.model_copy(update={"min_expected_positives": 11})})
    kinds = lambda registry: [e.__class__.__name__ for e in expectations(registry, DS, history)]  # noqa: E731
    assert "ExpectColumnMeanToBeBetween" in kinds(REGISTRY)  # 10 expected >= 5
    assert "ExpectColumnMeanToBeBetween" not in kinds(strict)  # 10 expected < 11: noise, not checked
    assert "ExpectTableRowCountToBeBetween" in kinds(strict)
