"""Registry files: valid ones load into frozen objects, bad ones fail naming the file and the feature."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from schemas import arrow as arrow_schemas
from schemas.errors import RegistryError
from schemas.registry import DEFAULT_REGISTRY_DIR, Kind, load_dataset, load_registry

GOOD = """\
dataset: shop
labels:
  - {name: click, window: 30m}
features:
  - {name: price, kind: dense, dtype: float64, default: 1.5, description: d, owner: o}
  - {name: tags, kind: sparse, dtype: int64, default: [], description: d, owner: o}
"""


def write(tmp_path: Path, text: str, name: str = "shop") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_demo_registry_is_large_enough_and_valid():
    registry = load_dataset("ads")
    assert len(registry.of_kind(Kind.DENSE)) >= 60
    assert len(registry.of_kind(Kind.SPARSE)) >= 20
    assert [(label.name, label.window) for label in registry.labels] == [
        ("click", dt.timedelta(hours=1)),
        ("conversion", dt.timedelta(days=3)),
    ]
    assert registry.source == str(DEFAULT_REGISTRY_DIR / "ads.yaml")


def test_loaded_registry_is_immutable(tmp_path):
    registry = load_registry(write(tmp_path, GOOD))
    assert registry.by_name["price"].fill_value == 1.5
    assert registry.by_name["tags"].fill_value == []
    with pytest.raises(ValidationError):
        registry.by_name["price"].kind = Kind.SPARSE


def test_arrow_schema_is_derived_from_the_registry(tmp_path):
    schema = arrow_schemas.table_schema(load_registry(write(tmp_path, GOOD)))
    assert schema.names == ["impression_id", "user_id", "item_id", "event_time", "label_click", "price", "tags", "ds"]
    assert schema.field("price").type == pa.float64()
    assert schema.field("tags").type == pa.list_(pa.int64())


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("owner: o}\n", "owner: o, colour: red}\n", r"shop\.yaml: feature 'price': unknown key 'colour'"),
        ("kind: sparse", "kind: sparse_ish", r"shop\.yaml: feature 'tags': kind 'sparse_ish' is not allowed; use 'dense', 'sparse' or 'weighted_sparse'"),
        ("name: tags", "name: price", r"shop\.yaml: feature 'price' is defined twice"),
        ("name: tags", "name: Tags-2", r"shop\.yaml: feature 'Tags-2': name: name 'Tags-2' is not allowed"),
        ("name: tags", "name: ds", r"shop\.yaml: feature 'ds': name: name 'ds' collides with a table column"),
        ("dtype: float64", "dtype: int64", r"feature 'price': dtype 'int64' is not allowed for kind 'dense'; use float32 or float64"),
        ("default: []", "default: 3.0", r"feature 'tags': default 3.0 of a sparse feature must be a list of ids"),
        ("window: 30m", "window: soon", r"shop\.yaml: labels\.0\.window: window 'soon' is not a positive duration"),
        (", description: d, owner: o}\n  - {name: tags", ", owner: o}\n  - {name: tags", r"feature 'price': required key 'description' is missing"),
    ],
)
def test_bad_registry_names_file_and_feature(tmp_path, replace, by, message):
    assert replace in GOOD
    path = write(tmp_path, GOOD.replace(replace, by, 1))
    with pytest.raises(RegistryError, match=message):
        load_registry(path)


def test_dataset_key_must_match_file_name(tmp_path):
    with pytest.raises(RegistryError, match=r"other\.yaml: declares dataset 'shop' but the file is named for 'other'"):
        load_registry(write(tmp_path, GOOD, name="other"))


def test_unknown_top_level_key_and_bad_yaml(tmp_path):
    with pytest.raises(RegistryError, match=r"shop\.yaml: unknown key 'owners'"):
        load_registry(write(tmp_path, GOOD + "owners: x\n"))
    with pytest.raises(RegistryError, match=r"shop\.yaml: not valid YAML"):
        load_registry(write(tmp_path, "dataset: [shop\n"))


def test_missing_dataset_lists_known_ones(tmp_path):
    write(tmp_path, GOOD)
    with pytest.raises(RegistryError, match=r"no registry for dataset 'nope'.*known datasets: shop"):
        load_dataset("nope", tmp_path)
    with pytest.raises(RegistryError, match=r"dataset name '\.\./x' is not allowed"):
        load_dataset("../x", tmp_path)


LIFECYCLE = """\
dataset: shop
labels:
  - {name: click, window: 30m}
features:
  - {name: price_usd, renamed_from: price, kind: dense, dtype: float64, description: d, owner: o}
  - {name: tags, kind: sparse, dtype: int64, description: d, owner: o,
     lifecycle: {status: deprecated, added_ds: 2026-11-01, deprecated_ds: 2026-11-05}}
  - {name: legacy, kind: dense, dtype: float32, description: d, owner: o, lifecycle: {status: dropped}}
  - {name: price_log, kind: dense, dtype: float32, derived: "log1p(price_usd)", description: d, owner: o}
"""


def test_lifecycle_renames_and_derived_features_shape_the_columns(tmp_path):
    registry = load_registry(write(tmp_path, LIFECYCLE))
    assert [f.name for f in registry.stored_features] == ["price_usd", "tags", "price_log"]  # dropped: no column
    assert [f.name for f in registry.logged_features] == ["price_usd", "tags"]  # derived: not logged
    assert registry.by_name["price_usd"].log_keys == ("price_usd", "price")
    assert registry.known_log_keys(Kind.DENSE) == ("legacy", "price", "price_usd")  # not price_log: derived
    assert registry.known_log_keys(Kind.SPARSE) == ("tags",)
    tags = registry.by_name["tags"]
    assert tags.populated_on(dt.date(2026, 11, 4)) and not tags.populated_on(dt.date(2026, 11, 5))
    assert not registry.by_name["legacy"].populated_on(dt.date(2026, 1, 1))
    assert "legacy" not in arrow_schemas.table_schema(registry).names


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("renamed_from: price,", "renamed_from: tags,", r"'price_usd' is renamed_from 'tags', but 'tags' is still a feature"),
        ("renamed_from: price,", "renamed_from: price_usd,", r"renamed_from 'price_usd' is the feature's own name"),
        ("deprecated_ds: 2026-11-05", "deprecated_ds: 2026-10-05", r"deprecated_ds 2026-10-05 is before added_ds"),
        ("status: dropped", "status: retired", r"feature 'legacy': lifecycle\.status 'retired' is not allowed"),
        ('derived: "log1p(price_usd)"', 'derived: ""', r"feature 'price_log': derived: String should have at least 1"),
    ],
)
def test_bad_lifecycle_renames_and_derivations_are_refused(tmp_path, replace, by, message):
    assert replace in LIFECYCLE
    with pytest.raises(RegistryError, match=message):
        load_registry(write(tmp_path, LIFECYCLE.replace(replace, by, 1)))


def test_retention_is_optional_and_parsed_in_days(tmp_path):
    assert load_registry(write(tmp_path, GOOD)).retention is None  # no key: partitions are kept forever
    assert load_registry(write(tmp_path, GOOD + "retention: 365d\n")).retention == dt.timedelta(days=365)
    assert load_registry(write(tmp_path, GOOD + "retention: 48h\n")).retention == dt.timedelta(days=2)
    assert load_dataset("ads").retention == dt.timedelta(days=365)
    assert load_dataset("criteo").retention is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("12h", r"shop\.yaml: retention: retention '12h' is not a whole number of days \(at least 1\).*e\.g\. 365d"),
        ("36h", r"shop\.yaml: retention: retention '36h' is not a whole number of days"),
        ("0d", r"shop\.yaml: retention: retention '0d' is not a duration; write it in days, e\.g\. 365d"),
        ("a year", r"shop\.yaml: retention: retention 'a year' is not a duration"),
        ("365", r"shop\.yaml: retention: retention 365 is not a duration; write it in days"),
    ],
)
def test_bad_retention_is_refused_naming_the_file(tmp_path, value, message):
    with pytest.raises(RegistryError, match=message):
        load_registry(write(tmp_path, GOOD + f"retention: {value}\n"))
