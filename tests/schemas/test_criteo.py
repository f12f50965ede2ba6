"""The Criteo layout's registry and the DLRM reference job spec, checked without Spark."""

from __future__ import annotations

import gzip

from etl.criteo.sample import main as sample_main
from etl.criteo.sample import write_sample
from ingest.spec import load_spec
from schemas.criteo import DENSE_FEATURES, SPARSE_FEATURES, layout_problems, registry_yaml
from schemas.registry import DEFAULT_REGISTRY_DIR, Kind, load_dataset
from trainer.model import model_shape

#: The DLRM reference's Kaggle tables (facebookresearch/dlrm, the ln_emb it prints for Criteo Kaggle).
REFERENCE_TABLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
                        5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)  # fmt: skip


def test_the_committed_criteo_registry_is_the_generated_one():
    assert (DEFAULT_REGISTRY_DIR / "criteo.yaml").read_text() == registry_yaml("criteo")
    registry = load_dataset("criteo")
    assert not layout_problems(registry)
    assert [f.name for f in registry.of_kind(Kind.DENSE)] == list(DENSE_FEATURES) == [f"int_{k}" for k in range(1, 14)]
    assert [f.name for f in registry.of_kind(Kind.SPARSE)] == list(SPARSE_FEATURES)
    assert all(f.quality.max_length == 1 and f.fill_value == [] for f in registry.of_kind(Kind.SPARSE))
    assert all(f.fill_value == 0.0 for f in registry.of_kind(Kind.DENSE))


def test_the_dlrm_job_has_the_reference_kaggle_shape():
    spec, registry = load_spec("jobs/criteo_dlrm.yaml")
    shape = model_shape(spec, registry)
    assert shape.dense_keys == DENSE_FEATURES and shape.sparse_keys == SPARSE_FEATURES
    assert shape.table_rows == REFERENCE_TABLE_ROWS and sum(shape.table_rows) == 33_762_577
    # --arch-sparse-feature-size=16 --arch-mlp-bot=13-512-256-64-16 --arch-mlp-top=512-256-1
    assert (shape.embedding_dim, shape.bottom_mlp, shape.top_mlp) == (16, (512, 256, 64), (512, 256))
    assert (spec.batch_size, spec.train.optimizer, spec.train.learning_rate) == (128, "sgd", 0.1)
    assert spec.days[-1] < spec.train.eval_days[0] and len(spec.days) + len(spec.train.eval_days) == 7


def test_the_sample_has_the_published_layout_and_its_malformed_lines_where_it_says(tmp_path, capsys):
    sample = write_sample(tmp_path / "day_0.gz", 500, seed=2, malformed=5)
    lines = gzip.open(sample.path, "rt").read().split("\n")[:-1]
    assert len(lines) == 500 and sample.malformed == (1, 125, 250, 375, 500)
    good = [line.split("\t") for n, line in enumerate(lines, start=1) if n not in sample.malformed]
    assert all(len(f) == 40 and f[0] in ("0", "1") for f in good)
    assert all(all(x == "" or x.removeprefix("-").isdigit() for x in f[1:14]) for f in good)
    assert all(all(x == "" or (len(x) == 8 and int(x, 16) >= 0) for x in f[14:]) for f in good)
    assert any(f[2].startswith("-") for f in good) and any(f[12] == "" for f in good)  # I2 negatives, I12 missing
    assert sample.clicks == sum(int(f[0]) for f in good)
    assert sample_main([str(tmp_path / "t.txt"), "--rows", "20"]) == 0
    assert "wrote" in capsys.readouterr().out and len((tmp_path / "t.txt").read_text().splitlines()) == 20
