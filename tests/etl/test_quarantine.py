"""Malformed input: every bad record reaches the quarantine with its place and reason; the good ones are published.

Real Spark, Delta and Great Expectations, with ANSI mode on (Spark 4's default, asserted here).
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from etl import label_join
from etl.records.quarantine import quarantine_table
from schemas.errors import DataRefusedError
from tests.conftest import dataset_name, write_landing
from tests.etl.test_label_join import DAY1, close_label_days, imp, lab

pytestmark = pytest.mark.spark

GOOD = [imp(f"good-{i}", f"2026-11-01T0{i}:00:00Z") for i in range(6)]
# (the raw line, the problem code, a part of the reason); the first line of the bad file is GOOD[0]
BAD_IMPRESSIONS = [
    ("", "empty_line", "empty line"),
    ('{"impression_id": "trunc", "event_time": "2026-11-01T0', "not_json", "not a JSON object"),
    (json.dumps({**imp("abc", "2026-11-01T01:00:00Z"), "dense": {"user_ctr_7d": "abc"}}), "bad_type",
     "dense feature 'user_ctr_7d': 'abc' is not a number"),
    (json.dumps({**imp("ids", "2026-11-01T01:00:00Z"), "sparse": {"user_topic_ids": "3,4"}}), "bad_type",
     "sparse feature 'user_topic_ids': '3,4' is not a list of integer ids"),
    (json.dumps({**imp("wid", "2026-11-01T01:00:00Z"), "weighted_sparse": {"user_topic_affinity": [{"id": "x"}]}}),
     "bad_type", "weighted sparse feature 'user_topic_affinity'"),
    (json.dumps({**imp("uid", "2026-11-01T01:00:00Z"), "user_id": "abc"}), "bad_type", "user_id 'abc' is not an integer"),
    (json.dumps({k: v for k, v in imp("x", "2026-11-01T01:00:00Z").items() if k != "impression_id"}), "missing_field",
     "missing required field impression_id"),
    (json.dumps(imp("month13", "2026-13-45T01:00:00Z")), "bad_timestamp", "event_time '2026-13-45T01:00:00Z' is not a timestamp"),
    (json.dumps(imp("skew", "2026-10-31T23:59:00Z")), "outside_ds", "is not in ds 2026-11-01"),
    (json.dumps({**imp("huge", "2026-11-01T01:00:00Z"), "dense": {"user_ctr_7d": 1e300}}), "not_finite",
     "dense feature 'user_ctr_7d': '1.0E300' is not a finite number of its dtype"),
]
BAD_LABELS = [
    ('{"impression_id": "good-1", "label_type": ', "not_json", "not a JSON object"),
    (json.dumps(lab("good-1", "share", "2026-11-01T01:00:10Z")), "unknown_label_type", "label_type 'share' is not one of"),
    (json.dumps({"impression_id": "good-2", "label_type": "click"}), "missing_field", "missing required field event_time"),
]


def _land(tmp_path):
    landing = tmp_path / "landing"
    write_landing(landing, "impressions", DAY1, GOOD[1:], part="good.jsonl")
    bad_file = write_landing(landing, "impressions", DAY1, [GOOD[0], *(raw for raw, _c, _r in BAD_IMPRESSIONS)],
                             hour="01", part="bad.jsonl")  # fmt: skip
    write_landing(landing, "impressions", DAY1, [], hour="02", part="empty.jsonl")  # a logger that wrote nothing
    (landing / "impressions" / f"ds={DAY1}" / "hour=02" / "empty.jsonl").write_text("")
    truncated = landing / "impressions" / f"ds={DAY1}" / "hour=03" / "truncated.jsonl"
    truncated.parent.mkdir(parents=True)
    truncated.write_text(json.dumps(imp("tail-ok", "2026-11-01T03:00:00Z")) + "\n" + '{"impression_id": "tail-cut", "us')
    write_landing(landing, "labels", DAY1, [lab("good-1", "click", "2026-11-01T01:00:10Z"),
                                            *(raw for raw, _c, _r in BAD_LABELS)])  # fmt: skip
    close_label_days(landing, DAY1, 4)
    return landing, bad_file


def _join(spark, request, tmp_path, registry_dir, **kwargs):
    return label_join.run(spark, label_join.LabelJoinConfig(
        dataset=dataset_name(request), ds=dt.date.fromisoformat(DAY1), home=tmp_path,
        landing=str(tmp_path / "landing"), registry_dir=registry_dir, **kwargs,
    ))  # fmt: skip


def test_each_kind_of_bad_record_is_quarantined_with_its_reason_and_the_good_ones_published(
    spark, request, tmp_path, registry_dir
):
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"  # bad casts are caught per record, not by turning this off
    _land(tmp_path)

    summary = _join(spark, request, tmp_path, registry_dir, max_bad_fraction=0.9)

    published = {r.impression_id for r in spark.table(summary.table).select("impression_id").collect()}
    assert published == {f"good-{i}" for i in range(6)} | {"tail-ok"}
    rows = spark.table(quarantine_table(dataset_name(request))).where(f"ds = '{DAY1}'").collect()
    by_file = {}
    for row in rows:
        by_file.setdefault((row.stream, row.source_file.rsplit("/", 1)[-1]), []).append(row)

    bad = sorted(by_file[("impressions", "bad.jsonl")], key=lambda r: r.line)
    assert [r.line for r in bad] == list(range(2, 2 + len(BAD_IMPRESSIONS)))  # line 1 is the good record
    for row, (raw, code, reason) in zip(bad, BAD_IMPRESSIONS, strict=True):
        assert (row.problem, row.raw, row.split_start, row.run_id) == (code, raw, 0, summary.run_id), row
        assert reason in row.reason, (row.reason, reason)
    (cut,) = by_file[("impressions", "truncated.jsonl")]
    assert (cut.line, cut.problem, cut.raw) == (2, "not_json", '{"impression_id": "tail-cut", "us')
    (empty,) = by_file[("impressions", "empty.jsonl")]
    assert (empty.problem, empty.line, empty.raw) == ("empty_file", None, "")
    labels = sorted(by_file[("labels", "part-00000.jsonl")], key=lambda r: r.line)
    assert [(r.line, r.problem) for r in labels] == [(i + 2, code) for i, (_raw, code, _r) in enumerate(BAD_LABELS)]
    assert all(reason in r.reason for r, (_raw, _c, reason) in zip(labels, BAD_LABELS, strict=True))

    assert summary.quarantined_impressions == len(BAD_IMPRESSIONS) + 1  # + the truncated line
    assert summary.quarantined_labels == len(BAD_LABELS)
    assert summary.impressions_read == len(GOOD) + len(BAD_IMPRESSIONS) + 2
    assert summary.problems["empty_file"] == 1 and summary.problems["bad_type"] == 4
    assert f"{len(BAD_IMPRESSIONS) + 1 + len(BAD_LABELS) + 1:,} -> {quarantine_table(dataset_name(request))}" in summary.format()
    assert {r.impression_id: r.label_click for r in spark.table(summary.table).collect()}["good-1"] == 1


def test_too_many_bad_records_refuse_the_ds_and_publish_nothing(spark, request, tmp_path, registry_dir):
    _land(tmp_path)

    with pytest.raises(DataRefusedError, match=r"11 of 18 impression records .* are malformed, more than the 1.00% allowed"
                       ) as refused:  # fmt: skip
        _join(spark, request, tmp_path, registry_dir)

    assert refused.value.exit_status == 3
    table = f"featurehouse.{dataset_name(request)}"
    assert spark.table(table).count() == 0  # created empty, nothing published
    assert spark.table(quarantine_table(dataset_name(request))).count() == len(BAD_IMPRESSIONS) + 1 + len(BAD_LABELS) + 1
    assert not spark.catalog.databaseExists("featurehouse_staging") or all(  # nothing staged either
        not t.name.startswith(dataset_name(request)) for t in spark.catalog.listTables("featurehouse_staging")
    )


def test_an_unknown_feature_beside_a_malformed_known_one_is_quarantined_as_before(spark, request, tmp_path, registry_dir):
    """The record parser knows only the registry's names; unknown names are counted from the keys alone."""
    landing = tmp_path / "landing"
    at = "2026-11-01T05:00:00Z"
    both = {**imp("both", at), "dense": {"mystery": 0.5, "user_ctr_7d": "abc"}}  # unknown + malformed known value
    fine = {**imp("fine", at), "dense": {"mystery": 0.5, "user_ctr_7d": 0.25}, "sparse": {"other_ids": [1]}}
    odd = {**imp("odd", at), "dense": {"user_ctr_7d": 0.5, "odd_ratio": "n/a"}}  # only an unknown value is malformed
    write_landing(landing, "impressions", DAY1, [fine, both, odd])
    close_label_days(landing, DAY1, 4)

    summary = _join(spark, request, tmp_path, registry_dir, max_bad_fraction=0.9)

    (row,) = spark.table(quarantine_table(dataset_name(request))).where(f"ds = '{DAY1}'").collect()
    assert (row.line, row.problem, row.reason) == (2, "bad_type", "dense feature 'user_ctr_7d': 'abc' is not a number")
    assert summary.quarantined_impressions == 1 and summary.impressions_read == 3
    # Only usable records count their unknown names; the value under an unknown name is not parsed, so a
    # record whose only odd value is under an unknown name is published (the name counted, the value dropped).
    assert summary.unknown_features == ("mystery", "odd_ratio", "other_ids")
    assert summary.unknown_feature_values == 3
    published = {r.impression_id: r.user_ctr_7d for r in spark.table(summary.table).collect()}
    assert published == {"fine": 0.25, "odd": 0.5}
