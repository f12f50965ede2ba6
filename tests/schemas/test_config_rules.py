"""The range rules of job configs (schemas/config.py), each at its one place."""

import datetime as dt
import math

import numpy as np
import pytest

from etl.generate.job import GenerateConfig
from etl.kafka.produce import ProduceConfig
from schemas.config import (
    HALF_FRACTION,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    POSITIVE_SECONDS,
    satisfies,
)
from schemas.errors import ConfigError, InvalidNameError


@pytest.mark.parametrize(
    ("rule", "allowed", "refused"),
    [
        (POSITIVE_INT, [1, 2**40], [0, -1, True, 2.0, "2", None, np.int64(3)]),
        (NON_NEGATIVE_INT, [0, 5], [-1, False, 0.0, "0"]),
        (POSITIVE_NUMBER, [1, 0.5, 1e300], [0, -0.1, math.inf, math.nan, True, "1"]),
        (POSITIVE_SECONDS, [0.25, 3, math.inf], [0, -1.0, math.nan, False]),
        (HALF_FRACTION, [0, 0.0, 0.5, 0.01], [-0.01, 0.51, 1, True, math.nan]),
    ],
)
def test_each_rule_allows_and_refuses_exactly_its_range(rule, allowed, refused):
    assert [satisfies(value, rule) for value in allowed] == [True] * len(allowed)
    assert [satisfies(value, rule) for value in refused] == [False] * len(refused)
    assert satisfies(None, rule, optional=True)


def test_generate_and_produce_share_the_landing_days_rules(tmp_path):
    start = dt.date(2026, 11, 30)
    generate = GenerateConfig(home=str(tmp_path), start=start, days=3, impressions_per_day=np.int64(10))
    produce = ProduceConfig(home=str(tmp_path), dataset="ads", start=start, days=3, bootstrap="127.0.0.1:9092")
    assert generate.dates == produce.dates == [dt.date(2026, 11, 30), dt.date(2026, 12, 1), dt.date(2026, 12, 2)]
    assert generate.landing == produce.landing == tmp_path / "landing"
    assert generate.impressions_per_day == 10 and type(generate.impressions_per_day) is int
    for make in (lambda **kw: GenerateConfig(home=tmp_path, **kw),
                 lambda **kw: ProduceConfig(home=tmp_path, dataset="ads", start=start, bootstrap="h:1", **kw)):
        with pytest.raises(ConfigError, match=r"^--days must be a positive whole number, got 0$"):
            make(days=0)
        with pytest.raises(ConfigError, match=r"^--days must be a positive whole number, got True$"):
            make(days=True)
    with pytest.raises(InvalidNameError, match="dataset name 'Ads' is not allowed"):
        ProduceConfig(home=tmp_path, dataset="Ads", start=start, bootstrap="h:1")
