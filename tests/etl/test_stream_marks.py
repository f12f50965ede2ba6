"""The stream's watermark and closed days (``etl.stream.marks``): pure Python, no Spark."""

from __future__ import annotations

import datetime as dt

import pytest

from etl.stream.marks import PLAN, MarkLog, Marks
from schemas.errors import ConfigError
from schemas.registry import load_dataset
from tests.conftest import SMALL_REGISTRY

HOUR = dt.timedelta(hours=1)


def at(day: int, hour: int = 0, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 11, day, hour, minute, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    folder = tmp_path_factory.mktemp("registry")
    (folder / "m.yaml").write_text(SMALL_REGISTRY.format(dataset="m"))  # longest window: conversion, 3d
    return load_dataset("m", folder)


def test_either_source_moves_the_watermark():
    marks = Marks(impressions=at(2, 10))
    assert marks.watermark(HOUR) == at(2, 9)
    assert marks.after(None, at(3, 10)).watermark(HOUR) == at(3, 9)  # labels alone move it on
    assert marks.after(at(4), None).after(None, at(3)).watermark(HOUR) == at(3, 23)  # it never goes back


def test_a_day_closes_when_its_windows_and_its_impressions_are_behind_the_watermark(registry):
    assert Marks().closed_through(registry, HOUR) is None
    assert Marks(labels=at(9)).closed_through(registry, HOUR) is None  # no impression seen: nothing closes
    # day 1 ends at day 2 00:00; its longest window at day 5 00:00; the watermark is 1h behind the newest event
    assert Marks(at(5, 0, 59), None).closed_through(registry, HOUR) == dt.date(2026, 10, 31)
    assert Marks(at(5, 1, 1), None).closed_through(registry, HOUR) == dt.date(2026, 11, 1)
    # labels far ahead close no day the impressions have not passed: the slower side is waited for
    assert Marks(at(1, 23), at(9)).closed_through(registry, HOUR) == dt.date(2026, 10, 31)
    assert Marks(at(2, 1, 1), at(9)).closed_through(registry, HOUR) == dt.date(2026, 11, 1)
    assert Marks(at(3, 12), at(9)).closed_through(registry, HOUR) == dt.date(2026, 11, 2)


def test_marks_are_read_back_through_a_batch(tmp_path):
    log = MarkLog(tmp_path / "checkpoint")
    assert log.through(None) == Marks() and log.through(3) == Marks() and log.last_committed() is None
    log.write(0, Marks(at(1), None))
    log.write(2, Marks(at(2), at(3)))
    assert log.through(0) == log.through(1) == Marks(at(1), None)
    assert log.through(2) == log.through(7) == Marks(at(2), at(3))
    (tmp_path / "checkpoint" / "commits").mkdir()
    (tmp_path / "checkpoint" / "commits" / "1").touch()
    assert log.last_committed() == 1


def test_a_new_checkpoint_is_claimed_and_an_old_plans_refused(tmp_path):
    fresh = MarkLog(tmp_path / "fresh")
    fresh.claim()
    assert (tmp_path / "fresh" / "featurehouse" / "plan").read_text().strip() == PLAN
    (tmp_path / "fresh" / "offsets").mkdir()
    (tmp_path / "fresh" / "offsets" / "0").touch()
    fresh.claim()  # ours: resumed
    old = tmp_path / "old"
    (old / "offsets").mkdir(parents=True)
    (old / "offsets" / "0").touch()
    with pytest.raises(ConfigError, match="previous plan"):
        MarkLog(old).claim()
