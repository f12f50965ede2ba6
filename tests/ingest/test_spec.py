"""Job specs: valid ones load against the registry; bad ones name the feature and the closest names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from ingest.spec import load_spec
from schemas.errors import ConfigError

SPEC = """\
job_id: ctr-model-v3
dataset: ads
ds: {from: 2026-11-01, to: 2026-11-03}
features:
  - name: user_ctr_7d
    transforms: [{fill: 0.0}, log1p]
  - name: item_topic_ids
  - name: user_region_ids
labels: [click]
batch_size: 512
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_a_valid_spec_loads_with_its_days_and_features(tmp_path):
    spec, registry = load_spec(write(tmp_path, SPEC))
    assert spec.days == (dt.date(2026, 11, 1), dt.date(2026, 11, 2), dt.date(2026, 11, 3))
    assert spec.feature_names == ("user_ctr_7d", "item_topic_ids", "user_region_ids")
    assert (spec.batch_size, spec.shuffle_buffer, spec.drop_last, registry.dataset) == (512, 0, False, "ads")
    listed, _ = load_spec(write(tmp_path, SPEC.replace("{from: 2026-11-01, to: 2026-11-03}", "[2026-11-03, 2026-11-01]")))
    assert listed.days == (dt.date(2026, 11, 1), dt.date(2026, 11, 3))


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("name: item_topic_ids", "name: item_topic_idz",
         r"feature 'item_topic_idz' is not in dataset 'ads' .*closest registry names: item_topic_ids"),
        ("name: item_topic_ids", "name: predicted_ctr_legacy",
         r"feature 'predicted_ctr_legacy' is deprecated from 2026-11-05 .*remove it from the job"),
        ("name: user_region_ids", "name: user_geo_ids", r"'user_geo_ids' was renamed to 'user_region_ids'"),
        ("name: user_region_ids", "name: user_ctr_7d", r"feature 'user_ctr_7d' is listed twice"),
        ("labels: [click]", "labels: [purchase]", r"label 'purchase' is not a label type of 'ads'; use one of click"),
        ("to: 2026-11-03", "to: 2026-10-03", r"ds range to 2026-10-03 is before from 2026-11-01"),
        ("batch_size: 512", "batch_size: 0", r"batch_size: Input should be greater than 0"),
        ("batch_size: 512", "batch_sise: 512", r"batch_sise: Extra inputs are not permitted"),
        ("job_id: ctr-model-v3", "job_id: 'ctr model'", r"job_id 'ctr model' is not allowed"),
        ("job_id: ctr-model-v3", "job_id: 'a/../../etc'", r"job_id 'a/\.\./\.\./etc' is not allowed"),  # a path
        ("dataset: ads", "dataset: adz", r"no registry for dataset 'adz'.*known datasets: ads"),
    ],
)  # fmt: skip
def test_bad_specs_are_refused_naming_the_problem(tmp_path, replace, by, message):
    assert replace in SPEC
    path = write(tmp_path, SPEC.replace(replace, by, 1))
    with pytest.raises(ConfigError, match=message) as err:
        load_spec(path)
    assert str(err.value).startswith(str(path))


def test_a_missing_spec_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match=r"job spec .*nope\.yaml does not exist"):
        load_spec(tmp_path / "nope.yaml")
