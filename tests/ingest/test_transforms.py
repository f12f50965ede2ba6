"""Spec transforms: parsed once, refused with a clear message, applied to whole columns like a per-row reference."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from ingest.transforms import (
    Clamp,
    DropEmpty,
    Fill,
    Hash,
    Log1p,
    SparseColumn,
    Standardize,
    Truncate,
    apply_dense,
    apply_dense_columns,
    apply_sparse,
    needs_stats,
    parse_transforms,
    resolve_stats,
    splitmix64,
)
from schemas.arrow import feature_type
from schemas.errors import ConfigError, TableError
from schemas.registry import Feature

SOURCE = "jobs/ctr.yaml"
MASK64 = (1 << 64) - 1


def feature(kind: str, *, default=None, name: str = "f") -> Feature:
    dtype = "float32" if kind == "dense" else "int64"
    return Feature(name=name, kind=kind, dtype=dtype, default=default, description="d", owner="o")


DENSE, SPARSE, WEIGHTED = feature("dense"), feature("sparse"), feature("weighted_sparse")
WEIGHTED_TYPE = feature_type(WEIGHTED)


def ref_splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def columns_as_lists(column: SparseColumn) -> list[list[int]]:
    ends = np.cumsum(column.lengths)
    return [column.values[end - n : end].tolist() for n, end in zip(column.lengths, ends, strict=True)]


# --- parsing ---


def test_parse_keeps_order_and_appends_the_registry_fill_for_dense():
    parsed = parse_transforms(
        feature("dense", default=7.5), [{"clamp": [0, 1]}, "log1p", {"standardize": {"mean": 0.5, "stddev": 2}}],
        source=SOURCE,
    )  # fmt: skip
    assert parsed == (Clamp(0.0, 1.0), Log1p(), Standardize(0.5, 2.0), Fill(7.5))
    assert parse_transforms(DENSE, ["log1p", {"fill": 3}], source=SOURCE) == (Log1p(), Fill(3.0))
    assert parse_transforms(DENSE, [{"fill": 1}, "log1p"], source=SOURCE) == (Fill(1.0), Log1p(), Fill(0.0))
    assert parse_transforms(DENSE, [], source=SOURCE) == (Fill(0.0),)
    assert parse_transforms(DENSE, ["standardize"], source=SOURCE) == (Standardize(), Fill(0.0))
    assert parse_transforms(DENSE, [{"log1p": None}], source=SOURCE) == (Log1p(), Fill(0.0))


def test_parse_sparse_adds_nothing():
    raw = [{"hash": 1000}, {"truncate": 3}, "drop_empty"]
    assert parse_transforms(SPARSE, raw, source=SOURCE) == (Hash(1000), Truncate(3), DropEmpty())
    assert parse_transforms(WEIGHTED, [], source=SOURCE) == ()


@pytest.mark.parametrize(
    ("feat", "raw", "message"),
    [
        (DENSE, ["sqrt"], r"jobs/ctr\.yaml: feature 'f' \(dense\): transforms\[0\] 'sqrt' is not a transform; "
                          r"transforms allowed for dense features: \{fill: 0\.0\}, \{clamp: \[lo, hi\]\}, log1p"),
        (DENSE, [{"hash": 10}], r"transforms\[0\] 'hash' is for sparse or weighted_sparse features; "
                                r"transforms allowed for dense features: \{fill"),
        (SPARSE, ["log1p"], r"feature 'f' \(sparse\): transforms\[0\] 'log1p' is for dense features; "
                            r"transforms allowed for sparse features: \{hash: N\}, \{truncate: k\}, drop_empty"),
        (WEIGHTED, [{"fill": 0}], r"\(weighted_sparse\): transforms\[0\] 'fill' is for dense features"),
        (DENSE, [{"fill": "zero"}], r"transforms\[0\]: fill takes a finite number, found 'zero'; write \{fill: 0\.0\}"),
        (DENSE, [{"fill": True}], r"fill takes a finite number, found True"),
        (DENSE, [{"fill": math.nan}], r"fill takes a finite number, found nan"),
        (DENSE, ["fill"], r"transforms\[0\] 'fill' needs an argument"),
        (DENSE, [{"clamp": [1, 0]}], r"clamp takes \[lo, hi\] with finite numbers lo <= hi \(null for no bound on one "
                                      r"side\), found \[1, 0\]"),
        (DENSE, [{"clamp": [None, None]}], r"clamp takes \[lo, hi\].*found \[None, None\]"),
        (DENSE, [{"clamp": [0, math.inf]}], r"clamp takes \[lo, hi\].*found \[0, inf\]; write .*\{clamp: \[0, null\]\}"),
        (DENSE, [{"clamp": [0]}], r"clamp takes \[lo, hi\].*found \[0\]"),
        (DENSE, [{"clamp": 5}], r"clamp takes \[lo, hi\].*found 5"),
        (DENSE, [{"log1p": 2}], r"log1p takes no argument, found 2; write it as bare log1p"),
        (DENSE, [{"standardize": {"mean": 0, "stddev": 0}}], r"standardize takes \{mean: m, stddev: s\}.*s > 0"),
        (DENSE, [{"standardize": {"mean": 0}}], r"standardize takes .*found \{'mean': 0\}"),
        (DENSE, [{"standardize": {"mean": 0, "stddev": 1, "x": 2}}], r"standardize takes"),
        (DENSE, [{"clamp": [0, 1], "fill": 0}], r"transforms\[0\] is \{.*\}, not a name or a one-key mapping"),
        (DENSE, [3], r"transforms\[0\] is 3, not a name or a one-key mapping"),
        (DENSE, ["log1p", "log1p"], r"transforms\[1\] 'log1p' is listed twice; list each transform once"),
        (DENSE, "log1p", r"transforms is str 'log1p', not a list"),
        (SPARSE, [{"hash": 0}], r"hash takes a positive integer, found 0; write \{hash: 100000\}"),
        (SPARSE, [{"hash": 2.5}], r"hash takes a positive integer, found 2\.5"),
        (SPARSE, [{"hash": 2**63}], r"hash takes a positive integer"),
        (SPARSE, [{"truncate": -1}], r"truncate takes a positive integer, found -1; write \{truncate: 20\}"),
        (SPARSE, ["truncate"], r"'truncate' needs an argument"),
        (SPARSE, [{"drop_empty": True}], r"drop_empty takes no argument, found True"),
    ],
)
def test_bad_specs_are_refused_naming_source_feature_and_allowed(feat, raw, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_transforms(feat, raw, source=SOURCE)
    assert str(info.value).startswith(f"{SOURCE}: feature 'f' ({feat.kind.value})")


# --- dense ---


DENSE_VALUES = [None, math.nan, -5.0, -0.5, 0.0, 0.25, 3.0, 40.0, None]


def dense_reference(values, steps, default):
    out = []
    for v in values:
        x = math.nan if v is None else v
        for name, arg in steps:
            if name == "fill" and math.isnan(x):
                x = arg
            elif name == "clamp" and not math.isnan(x):
                x = min(max(x, arg[0]), arg[1])
            elif name == "log1p":
                x = math.log1p(x)
            elif name == "standardize":
                x = (x - arg[0]) / arg[1]
        out.append(default if math.isnan(x) else x)
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("arrow_type", [pa.float32(), pa.float64()])
@pytest.mark.parametrize(
    ("raw", "steps"),
    [
        ([], []),
        ([{"clamp": [-0.5, 10]}, "log1p"], [("clamp", (-0.5, 10)), ("log1p", None)]),
        ([{"fill": 0.0}, {"clamp": [0, None]}, "log1p"], [("fill", 0.0), ("clamp", (0, math.inf)), ("log1p", None)]),
        ([{"fill": 2.0}, {"clamp": [0, 1]}, "log1p", {"standardize": {"mean": 0.3, "stddev": 0.2}}],
         [("fill", 2.0), ("clamp", (0, 1)), ("log1p", None), ("standardize", (0.3, 0.2))]),
        ([{"clamp": [0, 5]}, {"standardize": {"mean": 1, "stddev": 4}}, {"fill": -1}],
         [("clamp", (0, 5)), ("standardize", (1, 4)), ("fill", -1.0)]),
    ],
)  # fmt: skip
def test_dense_matches_a_per_row_reference_and_leaves_no_nulls(arrow_type, raw, steps):
    feat = feature("dense", default=9.0)
    chunked = pa.chunked_array([pa.array(DENSE_VALUES[:4], arrow_type), pa.array(DENSE_VALUES[4:], arrow_type)])
    out = apply_dense(chunked, parse_transforms(feat, raw, source=SOURCE))
    cast = [None if v is None else float(np.array(v, arrow_type.to_pandas_dtype())) for v in DENSE_VALUES]
    expected = dense_reference(cast, steps, 9.0)
    assert out.dtype == np.float32 and out.shape == (len(DENSE_VALUES),)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_dense_nulls_and_nan_take_the_registry_default_when_no_fill_is_given():
    transforms = parse_transforms(feature("dense", default=-3.0), [], source=SOURCE)
    out = apply_dense(pa.array([None, math.nan, 1.5]), transforms)
    assert out.tolist() == [-3.0, -3.0, 1.5]


def test_log1p_refuses_values_at_or_below_minus_one():
    transforms = parse_transforms(DENSE, ["log1p"], source=SOURCE)
    with pytest.raises(ConfigError, match=r"log1p got 2 values <= -1 \(smallest -4\.0\).*put \{clamp: \[0, hi\]\}"):
        apply_dense(pa.array([-1.0, -4.0, 0.0, None]), transforms)
    clamped = parse_transforms(DENSE, [{"clamp": [0, 10]}, "log1p"], source=SOURCE)
    np.testing.assert_allclose(apply_dense(pa.array([-1.0, -4.0, math.e - 1, None]), clamped), [0, 0, 1, 0], rtol=1e-6)


def test_bare_standardize_waits_for_catalog_stats():
    transforms = parse_transforms(DENSE, [{"fill": 3.0}, "standardize", {"clamp": [-2, 4]}], source=SOURCE)
    assert needs_stats(transforms)
    with pytest.raises(ConfigError, match=r"standardize has no mean/stddev yet; call .*resolve_stats"):
        apply_dense(pa.array([1.0]), transforms)
    resolved = resolve_stats(transforms, (2.0, 0.5), feature="f")
    assert not needs_stats(resolved) and resolved[1] == Standardize(2.0, 0.5)
    assert apply_dense(pa.array([1.0, 9.0, None, 0.0]), resolved).tolist() == [-2.0, 4.0, 2.0, -2.0]


def test_bare_standardize_after_a_value_changing_transform_is_refused():
    with pytest.raises(ConfigError, match=r"transforms\[1\] bare standardize uses the catalog's mean and stddev of "
                                          r"the stored values, so only fill may come before it; move it first"):
        parse_transforms(DENSE, ["log1p", "standardize"], source=SOURCE)
    given = parse_transforms(DENSE, [{"standardize": {"mean": 1, "stddev": 1}}], source=SOURCE)
    assert resolve_stats(given, None, feature="f") == given


@pytest.mark.parametrize("stats", [None, (1.0, 0.0), (1.0, None), (None, 2.0), (1.0, math.nan)])
def test_resolve_stats_refuses_missing_or_degenerate_stats(stats):
    transforms = parse_transforms(DENSE, ["standardize"], source=SOURCE)
    with pytest.raises(ConfigError, match=r"feature 'f': standardize needs the catalog's mean and stddev > 0, found"):
        resolve_stats(transforms, stats, feature="f")


@pytest.mark.parametrize(
    "raw",
    [[{"clamp": [0, 100]}, "log1p"], [{"fill": 2.0}, {"clamp": [0, 1]}, "log1p", {"standardize": {"mean": 0.3, "stddev": 0.2}}],
     [{"clamp": [-0.5, None]}, "log1p", {"fill": -1}]],
)  # fmt: skip
def test_dense_columns_sharing_transforms_equal_each_column_alone_and_the_row_reference(raw):
    rng = np.random.default_rng(4)
    values = rng.lognormal(0, 1, 3000) - 0.4
    values[rng.random(3000) < 0.05] = math.nan  # NaN stored as a value, besides nulls
    nulls = rng.random(3000) < 0.1
    arrays = [pa.array(values.astype(np.float32), mask=nulls), pa.array(values[::-1].copy()),
              pa.array(np.nan_to_num(values * 10).astype(np.int64), mask=nulls[::-1].copy()),
              pa.chunked_array([pa.array(values[:1000]), pa.array(values[1000:], mask=nulls[1000:])])]  # fmt: skip
    transforms = parse_transforms(feature("dense", default=9.0), raw, source=SOURCE)
    together = apply_dense_columns(arrays, transforms)
    assert together.dtype == np.float32 and together.shape == (3000, 4) and together.flags.c_contiguous
    for i, array in enumerate(arrays):
        alone = apply_dense(array, transforms)
        assert np.array_equal(together[:, i], alone)
        steps = [(type(t).name, (t.lo, t.hi) if isinstance(t, Clamp) else (t.mean, t.stddev) if isinstance(t, Standardize)
                  else getattr(t, "value", None)) for t in transforms]  # fmt: skip
        stored = [None if v is None else float(v) for v in array.to_pylist()]
        np.testing.assert_allclose(alone, dense_reference(stored, steps, 9.0), rtol=1e-6)


def test_dense_refuses_a_non_numeric_column():
    with pytest.raises(TableError, match=r"dense column has Arrow type string; a dense feature is float32 or float64"):
        apply_dense(pa.array(["a"]), (Fill(0.0),))


# --- sparse ---

LISTS = [[5, 1, 9], None, [], [7], [3, 3, 8, 2, 6], None, [4, 4]]


def sparse_array(lists=LISTS, *, chunks=2) -> pa.ChunkedArray:
    step = math.ceil(len(lists) / chunks)
    return pa.chunked_array([pa.array(lists[i : i + step], pa.list_(pa.int64())) for i in range(0, len(lists), step)])


def test_no_transforms_gives_ids_and_lengths_with_null_lists_empty():
    column = apply_sparse(sparse_array(), ())
    assert column.values.dtype == np.int64 and column.lengths.dtype == np.int32
    assert columns_as_lists(column) == [row or [] for row in LISTS]
    assert column.lengths.tolist() == [3, 0, 0, 1, 5, 0, 2] and column.weights is None and column.keep is None


def test_sliced_arrays_and_null_ids_inside_lists():
    base = pa.array([[1, 2], [3, None, 4], None, [None], [5]], pa.list_(pa.int64()))
    column = apply_sparse(base.slice(1, 3), ())
    assert columns_as_lists(column) == [[3, 4], [], []]


def test_hash_is_splitmix64_mod_n_in_range_and_deterministic():
    assert splitmix64(np.array([0, 1234567])).tolist() == [0xE220A8397B1DCDAF, 6457827717110365317]
    ids = np.array([0, 1, -1, 2**63 - 1, -(2**63), 42, 42, 123456789012345], dtype=np.int64)
    out = apply_sparse(pa.array([ids.tolist()], pa.list_(pa.int64())), (Hash(1000),)).values
    assert out.tolist() == [ref_splitmix64(int(i) & MASK64) % 1000 for i in ids]
    assert out[5] == out[6] and out.dtype == np.int64
    again = apply_sparse(pa.array([ids.tolist()], pa.list_(pa.int64())), (Hash(1000),)).values
    assert np.array_equal(out, again)


def test_hash_over_many_cache_chunks_is_the_plain_splitmix64_remainder():
    ids = np.random.default_rng(2).integers(-(2**63), 2**63 - 1, 100_003, dtype=np.int64, endpoint=True)
    plain = splitmix64(ids)  # no buckets: the finalizer alone
    for buckets in (1, 7, 1000, 2**40 + 15, 2**63 - 1):
        hashed = splitmix64(ids, buckets)
        assert np.array_equal(hashed, np.remainder(plain, np.uint64(buckets)))  # numpy's own remainder
    for i in (0, 32_767, 32_768, 65_536, 100_002):  # around the chunk edges, against the reference
        assert int(plain[i]) == ref_splitmix64(int(ids[i]) & MASK64)


def test_hash_spreads_sequential_ids_over_every_bucket():
    ids = list(range(10_000))
    out = apply_sparse(pa.array([ids[:5000], ids[5000:]], pa.list_(pa.int64())), (Hash(1000),))
    counts = np.bincount(out.values, minlength=1000)
    assert len(counts) == 1000 and (counts > 0).all()
    assert counts.max() < 3 * counts.mean()
    assert out.values.min() >= 0 and out.values.max() < 1000


def test_truncate_keeps_the_first_k_of_each_list():
    column = apply_sparse(sparse_array(chunks=3), parse_transforms(SPARSE, [{"truncate": 2}], source=SOURCE))
    assert columns_as_lists(column) == [(row or [])[:2] for row in LISTS]


def test_drop_empty_marks_empty_and_null_lists():
    transforms = parse_transforms(SPARSE, [{"hash": 50}, {"truncate": 1}, "drop_empty"], source=SOURCE)
    column = apply_sparse(sparse_array(), transforms)
    assert column.keep.tolist() == [bool(row) for row in LISTS]
    assert columns_as_lists(column) == [[ref_splitmix64(row[0]) % 50] if row else [] for row in LISTS]
    assert columns_as_lists(column.filter(column.keep)) == [[ref_splitmix64(row[0]) % 50] for row in LISTS if row]


WEIGHTED_LISTS = [
    [{"id": 10, "weight": 0.5}, {"id": 11, "weight": 0.25}, {"id": 12, "weight": 2.0}],
    None,
    [],
    [{"id": 13, "weight": 1.5}, None, {"id": None, "weight": 3.0}, {"id": 14, "weight": None},
     {"id": 15, "weight": 4.0}],
]


def test_weighted_lists_keep_weights_with_their_ids():
    array = pa.array(WEIGHTED_LISTS, WEIGHTED_TYPE)
    plain = apply_sparse(array, ())
    assert plain.values.tolist() == [10, 11, 12, 13, 15] and plain.weights.tolist() == [0.5, 0.25, 2.0, 1.5, 4.0]
    assert plain.lengths.tolist() == [3, 0, 0, 2] and plain.weights.dtype == np.float32
    transforms = parse_transforms(WEIGHTED, [{"truncate": 2}, {"hash": 7}, "drop_empty"], source=SOURCE)
    column = apply_sparse(pa.chunked_array([array.slice(0, 2), array.slice(2)]), transforms)
    assert column.lengths.tolist() == [2, 0, 0, 2]
    assert column.values.tolist() == [ref_splitmix64(i) % 7 for i in (10, 11, 13, 15)]
    assert column.weights.tolist() == [0.5, 0.25, 1.5, 4.0]
    assert column.keep.tolist() == [True, False, False, True]


def test_sparse_refuses_non_list_columns_and_dense_transforms():
    with pytest.raises(TableError, match=r"sparse column has Arrow type int64; a sparse feature is a list of ids"):
        apply_sparse(pa.array([1, 2]), ())
    with pytest.raises(TableError, match=r"elements must be int64 or struct<id, weight>"):
        apply_sparse(pa.array([["a"]]), ())
    with pytest.raises(ConfigError, match=r"Log1p\(\) is not a sparse transform"):
        apply_sparse(sparse_array(), (Log1p(),))
    with pytest.raises(ConfigError, match=r"Hash\(buckets=3\) is not a dense transform"):
        apply_dense(pa.array([1.0]), (Hash(3),))
