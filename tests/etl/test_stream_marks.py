"""The stream's watermark and closed days (``etl.stream.marks``): pure Python, no Spark."""

from __future__ import annotations

import datetime as dt

import pytest

from etl.stream.marks import PLAN, History, Marks, claim, legacy_marks
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


def test_marks_are_read_back_through_a_batch():
    history = History()
    assert history.through(None) == Marks() and history.through(3) == Marks() and history.last_batch() is None
    history = history.with_batch(0, Marks(at(1), None)).with_batch(2, Marks(at(2), at(3)))
    assert history.through(0) == history.through(1) == Marks(at(1), None)
    assert history.through(2) == history.through(7) == Marks(at(2), at(3))
    assert history.last_batch() == 2


def test_marks_files_of_earlier_versions_are_read(tmp_path):
    folder = tmp_path / "checkpoint" / "featurehouse" / "marks"
    folder.mkdir(parents=True)
    (folder / "0").write_text('{"impressions": "2026-11-01T00:00:00+00:00", "labels": null}')
    (folder / ".1.tmp").write_text("{")  # a write that did not finish
    assert legacy_marks(tmp_path / "checkpoint") == {0: Marks(at(1), None)}
    assert legacy_marks(tmp_path / "none") == {}


def test_a_new_checkpoint_is_claimed_and_an_old_plans_refused(tmp_path):
    claim(tmp_path / "fresh")
    assert (tmp_path / "fresh" / "featurehouse" / "plan").read_text().strip() == PLAN
    (tmp_path / "fresh" / "offsets").mkdir()
    (tmp_path / "fresh" / "offsets" / "0").touch()
    claim(tmp_path / "fresh")  # ours: resumed
    old = tmp_path / "old"
    (old / "offsets").mkdir(parents=True)
    (old / "offsets" / "0").touch()
    with pytest.raises(ConfigError, match="previous plan"):
        claim(old)


class _Writer:
    """A DataStreamWriter's ``start`` that fails with ``errors`` in turn, then returns ``"query"``."""

    def __init__(self, *errors: Exception):
        self.errors, self.starts = list(errors), 0

    def start(self):
        self.starts += 1
        if self.errors:
            raise self.errors.pop(0)
        return "query"


def test_a_query_whose_foreachbatch_worker_timed_out_is_started_again():
    from tenacity import wait_none

    from etl.stream.job import START_ATTEMPTS, WORKER_TIMEOUT
    from etl.stream.job import start_query as start

    def start_query(writer, dataset, say):
        return start(writer, dataset, say, wait=wait_none())

    said = []
    writer = _Writer(RuntimeError(f"java.net.SocketTimeoutException: {WORKER_TIMEOUT}"))
    assert start_query(writer, "m", said.append) == "query" and writer.starts == 2
    assert f"starting the query again (2/{START_ATTEMPTS})" in said[0]
    timeouts = [RuntimeError(WORKER_TIMEOUT) for _ in range(START_ATTEMPTS)]
    with pytest.raises(RuntimeError, match="connect back"):  # the last timeout is the error, as it came
        start_query(_Writer(*timeouts), "m", said.append)
    other = _Writer(RuntimeError("the checkpoint is of another plan"))
    with pytest.raises(RuntimeError, match="another plan"):
        start_query(other, "m", said.append)
    assert other.starts == 1  # any other error is not retried
