"""The seeded log generator: layout, markers, record formats, determinism and the planted signal."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from etl.generate.job import GenerateConfig, main, parse_args, run
from schemas.errors import ConfigError
from schemas.registry import Kind, load_dataset

SMALL = {"days": 2, "impressions_per_day": 3000, "users": 5000, "items": 2000, "seed": 11,
         "duplicate_rate": 0.05, "orphan_rate": 0.02}  # fmt: skip
IMPRESSION_DAYS = ["ds=2026-11-01", "ds=2026-11-02"]
# click 1h, conversion 3d: the last impression day's windows close on 2026-11-05
LABEL_DAYS = [f"ds=2026-11-0{d}" for d in range(1, 6)]
TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}):\d{2}:\d{2}\.\d{3}Z$")
PART = re.compile(r"^part-\d{5}\.jsonl$")


def _read(table: Path) -> list[tuple[Path, str, dict]]:
    """(file, raw line, parsed record) for every line under a landing table, in file order."""
    out = []
    for path in sorted(table.glob("ds=*/hour=*/*.jsonl")):
        for line in path.read_text().splitlines():
            out.append((path, line, json.loads(line)))
    return out


def _ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve by ranks (ties get their average rank)."""
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]
    n1, n0 = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _files(home: Path) -> dict[str, bytes]:
    landing = home / "landing"
    return {str(p.relative_to(landing)): p.read_bytes() for p in sorted(landing.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("generate")
    summary = run(GenerateConfig(home=home, **SMALL))
    landing = home / "landing"
    return home, summary, _read(landing / "impressions"), _read(landing / "labels")


@pytest.fixture(scope="module")
def distinct(generated):
    """Distinct impressions by id, and the distinct (id, label type) pairs of non-orphan labels."""
    _, _, impressions, labels = generated
    by_id = {rec["impression_id"]: rec for _, _, rec in impressions}
    pairs = {(rec["impression_id"], rec["label_type"]) for _, _, rec in labels if rec["impression_id"] in by_id}
    return by_id, pairs


def test_layout_and_success_markers(generated):
    home, _, _, _ = generated
    landing = home / "landing"
    assert sorted(p.name for p in landing.iterdir()) == ["impressions", "labels"]
    for table, days in (("impressions", IMPRESSION_DAYS), ("labels", LABEL_DAYS)):
        assert sorted(p.name for p in (landing / table).iterdir()) == days  # no staging folders left
        for ds in days:
            folder = landing / table / ds
            assert (folder / "_SUCCESS").read_bytes() == b""
            hours = [p for p in folder.iterdir() if p.name != "_SUCCESS"]
            assert all(re.fullmatch(r"hour=(0\d|1\d|2[0-3])", p.name) and p.is_dir() for p in hours)
            for hour in hours:
                parts = sorted(p.name for p in hour.iterdir())
                assert parts and all(PART.match(name) for name in parts)
                assert all((hour / name).stat().st_size > 0 for name in parts)
    assert len(list((landing / "impressions" / "ds=2026-11-01").glob("hour=*"))) == 24


def test_same_seed_same_bytes_other_seed_other_bytes(generated, tmp_path):
    home, _, _, _ = generated
    again = tmp_path / "again"
    run(GenerateConfig(home=again, **SMALL))
    assert _files(again) == _files(home)
    run(GenerateConfig(home=again, **SMALL))  # regenerating replaces the folders with the same bytes
    assert _files(again) == _files(home)
    other = tmp_path / "other"
    run(GenerateConfig(home=other, **{**SMALL, "seed": 12}))
    theirs, ours = _files(other), _files(home)
    assert sorted(k for k in theirs if k.endswith("_SUCCESS")) == sorted(k for k in ours if k.endswith("_SUCCESS"))
    assert all(theirs.get(k) != v for k, v in ours.items() if k.endswith(".jsonl"))


def test_impression_records_have_the_event_format(generated):
    _, _, impressions, _ = generated
    registry = load_dataset("ads")
    # Logged: not derived, added by the last generated day (item_ctr_3d is added on 2026-11-03), and a
    # renamed feature under its original key (user_region_ids as user_geo_ids).
    logged = [f for f in registry.logged_features if f.lifecycle.added_ds <= dt.date(2026, 11, 2)]
    names = {kind: {f.renamed_from or f.name for f in logged if f.kind is kind} for kind in Kind}
    assert "item_ctr_3d" not in names[Kind.DENSE] and "user_geo_ids" in names[Kind.SPARSE]
    assert {"item_ctr_7d_log", "user_topic_x_item_topic"}.isdisjoint(names[Kind.DENSE] | names[Kind.SPARSE])
    omitted = nulls = empty_lists = 0
    for _, _, rec in impressions:
        assert set(rec) == {"impression_id", "user_id", "item_id", "event_time", "dense", "sparse", "weighted_sparse"}
        assert isinstance(rec["impression_id"], str) and re.fullmatch(r"i\d{8}-\d{8,}", rec["impression_id"])
        assert isinstance(rec["user_id"], int) and 0 <= rec["user_id"] < SMALL["users"]
        assert isinstance(rec["item_id"], int) and 0 <= rec["item_id"] < SMALL["items"]
        assert TIME.match(rec["event_time"])
        assert set(rec["dense"]) <= names[Kind.DENSE]
        assert all(v is None or isinstance(v, float) for v in rec["dense"].values())
        assert set(rec["sparse"]) <= names[Kind.SPARSE]
        for ids in rec["sparse"].values():
            assert ids is None or all(isinstance(i, int) and i >= 0 for i in ids)
            empty_lists += ids == []
        assert set(rec["weighted_sparse"]) <= names[Kind.WEIGHTED_SPARSE]
        for pairs in rec["weighted_sparse"].values():
            for pair in pairs or []:
                assert set(pair) == {"id", "weight"} and isinstance(pair["id"], int) and 0 < pair["weight"] <= 1
        omitted += len(names[Kind.DENSE]) - len(rec["dense"])
        nulls += sum(v is None for v in rec["dense"].values())
    assert omitted > nulls > 0  # missing values: mostly omitted keys, sometimes null
    assert empty_lists > 0
    positions = {rec["dense"].get("position") for _, _, rec in impressions} - {None}
    assert positions <= {float(p) for p in range(1, 11)} and len(positions) > 3


def test_partitions_follow_event_time_and_hours_are_sorted(generated):
    _, _, impressions, labels = generated
    for records in (impressions, labels):
        last: dict[Path, str] = {}
        for path, _, rec in records:
            day, hour = TIME.match(rec["event_time"]).groups()
            assert path.parent.parent.name == f"ds={day}" and path.parent.name == f"hour={hour}"
            assert rec["event_time"] >= last.get(path, "")
            last[path] = rec["event_time"]


def test_click_and_conversion_rates(distinct):
    by_id, pairs = distinct
    clicks = {i for i, t in pairs if t == "click"}
    conversions = {i for i, t in pairs if t == "conversion"}
    assert 0.015 <= len(clicks) / len(by_id) <= 0.06
    assert 0 < len(conversions) < len(clicks)
    assert conversions <= clicks  # a conversion only follows a click


def test_duplicates_at_about_the_configured_rate(generated):
    _, summary, impressions, labels = generated
    for records, expected_dups in ((impressions, summary.duplicate_impressions), (labels, summary.duplicate_labels)):
        lines = Counter(line for _, line, _ in records)
        ids = Counter(rec["impression_id"] + rec.get("label_type", "") for _, _, rec in records)
        dups = sum(n - 1 for n in lines.values())
        assert dups == sum(n - 1 for n in ids.values()) == expected_dups  # a copy has the same content
        assert 0.3 * SMALL["duplicate_rate"] <= dups / len(records) <= 2 * SMALL["duplicate_rate"]


def test_orphan_labels_reference_no_impression(generated, distinct):
    _, summary, _, labels = generated
    by_id, _ = distinct
    orphans = [rec for _, _, rec in labels if rec["impression_id"] not in by_id]
    assert len(orphans) == summary.orphan_labels > 0
    assert 0.3 * SMALL["orphan_rate"] <= len(orphans) / len(labels) <= 2 * SMALL["orphan_rate"]


def test_late_labels_and_labels_on_later_days(generated, distinct):
    _, summary, _, labels = generated
    by_id, _ = distinct
    windows = {"click": 3_600_000, "conversion": 3 * 86_400_000}
    late_clicks = later_ds = outside = 0
    click_delays = []
    for path, _, rec in labels:
        if rec["impression_id"] not in by_id:
            continue
        shown = by_id[rec["impression_id"]]["event_time"]
        delay = _ms(rec["event_time"]) - _ms(shown)
        assert delay >= 0
        outside += delay > windows[rec["label_type"]]
        if rec["label_type"] == "click":
            click_delays.append(delay)
            late_clicks += delay > 3_600_000
        later_ds += path.parent.parent.name > f"ds={shown[:10]}"
    assert late_clicks > 0 and later_ds > 0
    assert outside == summary.labels_outside_window
    assert np.median(click_delays) < 600_000  # most clicks follow within minutes


def test_users_are_skewed(distinct):
    by_id, _ = distinct
    per_user = sorted(Counter(rec["user_id"] for rec in by_id.values()).values(), reverse=True)
    top = per_user[: max(1, SMALL["users"] // 100)]
    assert sum(top) / len(by_id) > 0.10


def test_planted_signal_is_learnable(distinct):
    by_id, pairs = distinct
    clicked = {i for i, t in pairs if t == "click"}
    scored = [(rec["dense"]["predicted_ctr_legacy"], i in clicked) for i, rec in by_id.items()
              if rec["dense"].get("predicted_ctr_legacy") is not None]  # fmt: skip
    scores, positive = np.array([s for s, _ in scored]), np.array([c for _, c in scored])
    assert _auc(scores, positive) > 0.65
    match = np.array([
        bool(set(rec["sparse"].get("user_interest_topic_ids") or []) & set(rec["sparse"].get("item_topic_ids") or []))
        for rec in by_id.values()
    ])  # fmt: skip
    y = np.array([i in clicked for i in by_id])
    assert 0.1 < match.mean() < 0.9
    assert y[match].mean() > 1.3 * y[~match].mean()


def test_summary_counts_what_was_written(generated, distinct):
    home, summary, impressions, labels = generated
    by_id, pairs = distinct
    landing = home / "landing"
    assert summary.impressions_written == len(impressions)
    assert summary.distinct_impressions == len(by_id) == SMALL["days"] * SMALL["impressions_per_day"]
    assert summary.labels_written == len(labels)
    assert summary.clicks == sum(t == "click" for _, t in pairs)
    assert summary.conversions == sum(t == "conversion" for _, t in pairs)
    parts = list(landing.rglob("*.jsonl"))
    assert summary.files == len(parts) and summary.bytes_written == sum(p.stat().st_size for p in parts)
    assert [d.ds for d in summary.label_days] == [name.removeprefix("ds=") for name in LABEL_DAYS]
    text = summary.format()
    assert "impressions" in text and "2026-11-05" in text and len(text.splitlines()) < 20


def test_any_registry_drives_the_labels_and_features(tmp_path):
    (tmp_path / "reg").mkdir()
    (tmp_path / "reg" / "feed.yaml").write_text(
        "dataset: feed\nlabels:\n  - {name: like, window: 30m}\n  - {name: share, window: 1d}\nfeatures:\n"
        + "".join(
            f"  - {{name: {name}, kind: {kind}, dtype: {dtype}, description: d, owner: o}}\n"
            for name, kind, dtype in [("watch_seconds_7d", "dense", "float64"), ("foo", "dense", "float32"),
                                      ("creator_id", "sparse", "int64"), ("hashtags", "weighted_sparse", "int64")]
        )  # fmt: skip
    )
    summary = run(GenerateConfig(home=tmp_path, dataset="feed", registry_dir=tmp_path / "reg", days=1,
                                 impressions_per_day=2000, users=500, items=300))  # fmt: skip
    labels = _read(tmp_path / "landing" / "labels")
    assert {rec["label_type"] for _, _, rec in labels} == {"like", "share"}
    assert sorted(p.name for p in (tmp_path / "landing" / "labels").iterdir()) == ["ds=2026-11-01", "ds=2026-11-02"]
    rec = _read(tmp_path / "landing" / "impressions")[0][2]
    assert set(rec["dense"]) <= {"watch_seconds_7d", "foo"} and set(rec["weighted_sparse"]) <= {"hashtags"}
    assert summary.distinct_impressions == 2000


@pytest.mark.parametrize(
    ("change", "flag"),
    [({"days": 0}, "--days"), ({"duplicate_rate": 2}, "--duplicate-rate"), ({"orphan_rate": -0.1}, "--orphan-rate"),
     ({"impressions_per_day": 0}, "--impressions-per-day"), ({"users": -1}, "--users")],
)  # fmt: skip
def test_bad_config_names_the_flag(tmp_path, change, flag):
    with pytest.raises(ConfigError, match=re.escape(flag)):
        GenerateConfig(home=tmp_path, **change)


def test_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEATUREHOUSE_HOME", str(tmp_path / "env-home"))
    config = parse_args(["--days", "3", "--start", "2026-12-30", "--duplicate-rate", "0"])
    assert config.home == tmp_path / "env-home" and config.days == 3 and config.start == dt.date(2026, 12, 30)
    assert config.duplicate_rate == 0 and config.impressions_per_day == 20_000 and config.dataset == "ads"
    assert main(["--home", str(tmp_path), "--days", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --days must be")
    assert main(["--home", str(tmp_path), "--start", "2026-13-01"]) == 2
    assert "--start" in capsys.readouterr().err
    assert main(["--home", str(tmp_path), "--dataset", "nope"]) == 2
    assert "no registry for dataset 'nope'" in capsys.readouterr().err
    assert main(["--home", str(tmp_path), "--days", "1", "--impressions-per-day", "500", "--users", "100"]) == 0
    captured = capsys.readouterr()
    assert "day 1/1 2026-11-01: 5" in captured.err and "generated ads into" in captured.out
    assert (tmp_path / "landing" / "labels" / "ds=2026-11-04" / "_SUCCESS").exists()
