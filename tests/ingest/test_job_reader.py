"""The Converter: row groups (pyarrow) to Blocks, dense features with the same transforms as one matrix."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ingest.job_reader import Converter
from ingest.transforms import Clamp, Fill, Hash, Log1p, apply_dense, apply_sparse
from schemas.errors import ConfigError

LOG = (Clamp(0.0, 100.0), Log1p(), Fill(0.0))
RAW = (Fill(-1.0),)


def table(rows: int = 500) -> pa.Table:
    rng = np.random.default_rng(1)
    dense = {name: pa.array(rng.lognormal(0, 1, rows) - 1.2, mask=rng.random(rows) < 0.1) for name in "abcd"}
    lists = [list(rng.integers(0, 10**6, rng.integers(0, 4))) for _ in range(rows)]
    return pa.table({**dense, "ids": pa.array(lists, pa.list_(pa.int64())), "label_click": rng.integers(0, 2, rows)})


def test_dense_features_keep_their_order_whatever_their_transform_groups():
    data = table()
    converter = Converter(dense=(("a", LOG), ("b", RAW), ("c", LOG), ("d", RAW)), sparse=(("ids", (Hash(97),)),),
                          labels=(("click", "label_click"),))  # fmt: skip
    block = converter(data)
    assert block.keys.dense == ("a", "b", "c", "d") and block.dense.shape == (500, 4) and block.dense.dtype == np.float32
    for i, (name, transforms) in enumerate(converter.dense):
        assert np.array_equal(block.dense[:, i], apply_dense(data.column(name), transforms)), name
    assert np.array_equal(block.sparse[0].values, apply_sparse(data.column("ids"), (Hash(97),)).values)
    assert block.labels[:, 0].tolist() == data.column("label_click").to_pylist()


def test_a_transform_error_names_the_features_it_came_from():
    converter = Converter(dense=(("a", (Log1p(), Fill(0.0))), ("b", RAW), ("c", (Log1p(), Fill(0.0)))), sparse=(),
                          labels=())  # fmt: skip
    with pytest.raises(ConfigError, match=r"dense feature\(s\) a, c: log1p got \d+ values <= -1"):
        converter(table())
