"""SQL text built from registry values: each literal reads back in Spark as the value and type F.lit gives it."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from schemas.sql_text import identifier, literal

VALUES = [0, 1, -7, 2**31, -(2**63), 0.5, 1e-05, 1e16, -3.25, math.inf, -math.inf, True, False, "plain",
          "it's a \\ back'slash", dt.date(2026, 11, 1)]  # fmt: skip


def test_identifiers_are_quoted():
    assert identifier("user_ctr_7d") == "`user_ctr_7d`"
    assert identifier("odd`name") == "`odd``name`"


def test_values_without_a_literal_are_refused():
    with pytest.raises(ValueError, match="outside BIGINT"):
        literal(2**63)
    with pytest.raises(TypeError, match="no Spark SQL literal for list"):
        literal([1])


@pytest.mark.spark
def test_literals_read_back_as_the_value_and_type_of_f_lit(spark):
    from pyspark.sql import functions as F

    text = spark.sql("SELECT " + ", ".join(f"{literal(v)} AS v{i}" for i, v in enumerate(VALUES)))
    lit = spark.range(1).select(*[F.lit(v).alias(f"v{i}") for i, v in enumerate(VALUES)])
    assert [f.dataType for f in text.schema.fields] == [f.dataType for f in lit.schema.fields]
    assert list(text.first()) == VALUES
    nan = spark.sql(f"SELECT {literal(math.nan)} AS v").first().v
    assert math.isnan(nan)
