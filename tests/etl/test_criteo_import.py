"""``featurehouse import criteo``: a file in Criteo's published format, written here, imported with real Spark and
Delta, read back through the reader (compared with a parse by Python's csv module) and trained on."""

from __future__ import annotations

import csv
import gzip
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from etl.criteo import importer as criteo_import
from etl.criteo.importer import CriteoImportConfig, split_sizes
from etl.criteo.sample import lines as sample_lines
from etl.criteo.sample import planted_scores
from schemas.criteo import DENSE_FEATURES, SPARSE_FEATURES, registry_yaml
from schemas.errors import ConfigError, DataRefusedError, RegistryError
from trainer.metrics import auc

DATASET = "t_criteo_kaggle"
FIRST = "2026-01-01"
DAYS = [f"2026-01-0{d}" for d in range(1, 5)]  # 4 days keep the test short; Kaggle's 7 split the same way
SEED = 5

HEXES = [f"{0x1000_0000 + 7919 * k:08x}" for k in range(26)]
FULL = "\t".join(["1", "5", "-2", "0", "123456789", "1", "2", "3", "4", "5", "6", "7", "8", "9", *HEXES])
EMPTIES = "\t".join(["0", *[""] * 13, *[""] * 26])
UPPER = "\t".join(["0", "007", *[""] * 12, "ABCDEF01", *[""] * 25])
CRAFTED = [FULL, EMPTIES, UPPER]
#: (line text, problem, words of the reason), placed after the crafted lines
MALFORMED = [
    ("\t".join(FULL.split("\t")[1:]), "field_count", "39 tab-separated fields, expected 40"),
    ("\t".join(["1", "3.5", *FULL.split("\t")[2:]]), "not_integer", "field 2 (I1, int_1): '3.5' is not an integer"),
    ("\t".join([*FULL.split("\t")[:20], "abcdefgz", *FULL.split("\t")[21:]]), "not_hex",
     "field 21 (C7, cat_7): 'abcdefgz' is not 8 hex digits"),
    ("\t".join([*FULL.split("\t")[:39], "abcdef1"]), "not_hex", "field 40 (C26, cat_26): 'abcdef1' is not 8 hex"),
    ("", "empty_line", "empty line"),
]  # fmt: skip
LATE_BAD_LINE = 12000  # a malformed line in day 3, to number lines past the first split and day
LINES = 20000


def write_kaggle_file(path: Path) -> dict[int, tuple[str, str]]:
    """The test's train.txt: crafted lines, malformed ones, then planted-signal lines; returns line -> (problem, reason)."""
    planted = [line for _label, line, _bad in sample_lines(LINES - len(CRAFTED) - len(MALFORMED) - 1, seed=SEED)]
    text = [*CRAFTED, *(m[0] for m in MALFORMED), *planted]
    text.insert(LATE_BAD_LINE - 1, "1\t2\t3")
    path.write_text("\n".join(text) + "\n")
    bad = {len(CRAFTED) + i + 1: (problem, reason) for i, (_line, problem, reason) in enumerate(MALFORMED)}
    bad[LATE_BAD_LINE] = ("field_count", "3 tab-separated fields, expected 40")
    return bad


def reference_parse(path: Path, days: list[str]) -> list[dict]:
    """The file parsed with Python's csv module, independently of Spark: one dict per usable line."""
    sizes = split_sizes(sum(1 for _ in path.open()), len(days))
    ends = np.cumsum(sizes)
    rows = []
    with path.open(newline="") as handle:
        for number, fields in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if len(fields) != 40 or fields[0] not in ("0", "1"):
                continue
            try:
                ints = [int(x) if x else None for x in fields[1:14]]
                cats = [[int(x, 16)] if x else [] for x in fields[14:]]
            except ValueError:
                continue
            if any(x and len(x) != 8 for x in fields[14:]):
                continue
            rows.append({"line": number, "ds": days[int(np.searchsorted(ends, number))], "label": int(fields[0]),
                         "ints": ints, "cats": cats})  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def imported(spark, spark_home: Path, tmp_path_factory):
    """train.txt imported with --split-days 4, read in small splits (so lines are numbered across splits), and the
    catalog synced."""
    from etl.maintenance import catalog

    root = tmp_path_factory.mktemp("criteo")
    path = root / "train.txt"
    bad = write_kaggle_file(path)
    config = CriteoImportConfig(dataset=DATASET, ds=dt_date(FIRST), files=(str(path),), home=spark_home,
                                split_days=len(DAYS), registry_dir=root / "registry")  # fmt: skip
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(1024 * 1024))  # ~5 splits of the 4.9 MB file
    try:
        summary = criteo_import.run(spark, config)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    catalog.run(spark, catalog.CatalogConfig(action="sync", home=spark_home, datasets=(DATASET,),
                                             registry_dir=root / "registry"))  # fmt: skip
    return {"path": path, "bad": bad, "summary": summary, "registry_dir": root / "registry", "home": spark_home,
            "reference": reference_parse(path, DAYS)}  # fmt: skip


def dt_date(text: str):
    import datetime as dt

    return dt.date.fromisoformat(text)


@pytest.mark.spark
def test_the_file_imports_one_partition_per_day_with_the_values_it_holds(spark, imported):
    from pyspark.sql import functions as F

    summary, reference = imported["summary"], imported["reference"]
    assert [d.ds for d in summary.days] == DAYS and not summary.refused
    assert [d.lines for d in summary.days] == [5000] * 4 and summary.lines == LINES
    assert [d.bad for d in summary.days] == [len(MALFORMED), 0, 1, 0]
    table = spark.table(f"featurehouse.{DATASET}")
    counts = {r["ds"]: r["count"] for r in table.groupBy("ds").count().collect()}
    assert counts == {ds: sum(1 for r in reference if r["ds"] == ds) for ds in DAYS}
    assert sum(counts.values()) == LINES - len(imported["bad"])
    rows = {r["impression_id"]: r.asDict() for r in table.where(F.col("impression_id").isin(
        "train.txt:1", "train.txt:2", "train.txt:3")).collect()}  # fmt: skip
    full = rows["train.txt:1"]
    assert (full["label_click"], full["ds"], full["user_id"], full["event_time"]) == (1, FIRST, None, None)
    assert [full[name] for name in DENSE_FEATURES] == [5.0, -2.0, 0.0, 123456792.0, *map(float, range(1, 10))]
    assert [full[name] for name in SPARSE_FEATURES] == [[int(h, 16)] for h in HEXES]  # 123456789 as float32 ^
    empties = rows["train.txt:2"]
    assert empties["label_click"] == 0
    assert all(empties[name] is None for name in DENSE_FEATURES) and all(empties[n] == [] for n in SPARSE_FEATURES)
    upper = rows["train.txt:3"]
    assert (upper["int_1"], upper["cat_1"], upper["int_2"], upper["cat_2"]) == (7.0, [0xABCDEF01], None, [])


@pytest.mark.spark
def test_malformed_lines_are_quarantined_with_their_line_and_reason(spark, imported):
    from pyspark.sql import functions as F

    quarantined = spark.table(f"featurehouse_quarantine.{DATASET}").where(
        F.col("run_id") == imported["summary"].run_id).collect()
    found = {r["line"]: r for r in quarantined}
    assert set(found) == set(imported["bad"])
    text = imported["path"].read_text().split("\n")
    for line, (problem, reason) in imported["bad"].items():
        row = found[line]
        assert (row["problem"], row["stream"], row["raw"]) == (problem, "criteo", text[line - 1])
        assert reason in row["reason"], row["reason"]
        assert row["source_file"] == str(imported["path"]) and row["split_start"] == 0
    assert found[LATE_BAD_LINE]["ds"] == "2026-01-03" and {found[n]["ds"] for n in range(4, 9)} == {FIRST}


@pytest.mark.spark
def test_each_day_passed_the_quality_gate_and_the_registry_was_generated(spark, imported):
    from pyspark.sql import functions as F

    gate = spark.table("featurehouse_catalog.quality_gate").where(
        (F.col("dataset") == DATASET) & (F.col("run_id") == imported["summary"].run_id)).collect()
    assert sorted((r["ds"], r["decision"], r["rows"]) for r in gate) == [
        (d.ds, "published", d.rows) for d in imported["summary"].days]
    assert all(not r["failed_expectations"] and r["expectations"] >= 69 for r in gate)
    assert (imported["registry_dir"] / f"{DATASET}.yaml").read_text() == registry_yaml(DATASET)
    features = spark.table("featurehouse_catalog.features").where(F.col("dataset") == DATASET).count()
    assert features == len(DENSE_FEATURES) + len(SPARSE_FEATURES)


def read_rows(imported, transforms_dense, *, name: str):
    """Every row of the days through the reader: (label, dense tuple, ids tuple) per row."""
    from ingest.job_reader import open_reader
    from ingest.spec import parse_spec
    from schemas.registry import load_dataset

    spec = parse_spec({
        "job_id": name, "dataset": DATASET, "ds": {"from": DAYS[0], "to": DAYS[-1]}, "labels": ["click"],
        "features": [*({"name": n, "transforms": transforms_dense} for n in DENSE_FEATURES),
                     *({"name": n, "embedding_rows": 2**32} for n in SPARSE_FEATURES)],
        "batch_size": 2048, "shuffle_buffer": 0,
    }, source=name)  # fmt: skip
    registry = load_dataset(DATASET, imported["registry_dir"])
    reader = open_reader(spec, registry, warehouse=str(imported["home"] / "warehouse"))
    out = []
    for batch in reader.dataset:
        assert batch.dense_keys == DENSE_FEATURES and batch.sparse_keys == SPARSE_FEATURES
        rows, offsets = len(batch), batch.offsets
        for r in range(rows):
            ids = tuple(tuple(batch.values[offsets[k * rows + r]: offsets[k * rows + r + 1]].tolist())
                        for k in range(len(SPARSE_FEATURES)))  # fmt: skip
            out.append((int(batch.labels[r, 0]), batch.dense[r].clone(), ids))
    return out


@pytest.mark.spark
def test_the_reader_gives_the_tensors_of_a_csv_module_parse_of_the_same_lines(imported):
    reference = imported["reference"]
    assert len(reference) == LINES - len(imported["bad"])
    expected_raw = sorted((r["label"], tuple(np.float32(x or 0) for x in r["ints"]), tuple(map(tuple, r["cats"])))
                          for r in reference)  # fmt: skip
    raw = read_rows(imported, [], name="criteo-raw")
    got_raw = sorted((label, tuple(dense.numpy()), ids) for label, dense, ids in raw)
    assert got_raw == expected_raw  # every value exactly: missing integers read as 0, missing categoricals as []

    # the DLRM reference's preprocessing: missing -> 0, negatives -> 0, log(1 + x)
    by_key = {(r["label"], tuple(map(tuple, r["cats"]))): r for r in reference}
    assert len(by_key) == len(reference)  # the ids tell the rows apart
    dlrm = read_rows(imported, [{"fill": 0.0}, {"clamp": [0, None]}, "log1p"], name="criteo-dlrm-read")
    got = torch.stack([dense for _label, dense, _ids in dlrm])
    want = torch.tensor([[math.log1p(max(x or 0, 0)) for x in by_key[(label, ids)]["ints"]]
                         for label, _dense, ids in dlrm], dtype=torch.float32)  # fmt: skip
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)  # float32 of the float64 reference
    assert any((r["ints"][1] or 0) < 0 for r in reference) and float(got.min()) == 0.0  # I2's negatives became 0


def planted_auc(rows: int = 200_000, seed: int = 0) -> float:
    """The AUC of the true click probability on ``rows`` fresh lines: about the best any model can do."""
    return auc(*planted_scores(rows, seed))


@pytest.mark.spark
def test_dlrm_learns_the_planted_signal_from_the_import(imported):
    from trainer.train import TrainConfig, run

    job = {
        "job_id": "criteo-signal", "dataset": DATASET, "ds": {"from": DAYS[0], "to": DAYS[2]}, "labels": ["click"],
        "features": [*({"name": n, "transforms": [{"fill": 0.0}, {"clamp": [0, None]}, "log1p"]} for n in DENSE_FEATURES),
                     *({"name": n, "transforms": [{"hash": 1000}]} for n in SPARSE_FEATURES)],
        "batch_size": 256, "shuffle_buffer": 8192, "seed": 3,
        "model": {"embedding_dim": 8, "bottom_mlp": [32], "top_mlp": [32]},
        "train": {"eval_ds": [DAYS[3]], "epochs": 2, "learning_rate": 0.05, "optimizer": "adagrad"},
    }  # fmt: skip
    path = imported["path"].parent / "criteo_signal.yaml"
    path.write_text(yaml.safe_dump(job))
    result = run(TrainConfig(job=path, home=imported["home"], registry_dir=imported["registry_dir"],
                             out=path.parent / "runs", device="cpu", restart=True), progress=lambda _line: None)  # fmt: skip
    got = result.metrics["click"]
    # Only I1 and C1 carry signal; the other 37 fields are noise. Random scores give 0.5, and the true click
    # probability (the best any model can do) about 0.81 on these rows; 15,000 training rows get a DLRM ~0.75.
    assert got.auc > 0.7, (got.auc, planted_auc(seed=SEED))
    assert got.rows == 5000


def write_gz(path: Path, lines: list[str]) -> Path:
    with gzip.open(path, "wt", newline="\n") as out:
        out.write("".join(line + "\n" for line in lines))
    return path


@pytest.mark.spark
def test_one_gzip_file_per_day_publishes_the_good_days_and_refuses_the_others(spark, spark_home, tmp_path):
    from pyspark.sql import functions as F

    dataset = "t_criteo_tb"
    good = [line for _l, line, _b in sample_lines(400, seed=1)]
    files = [
        write_gz(tmp_path / "day_0.gz", good[:200] + ["1\tnot\tcriteo"] + good[200:]),
        write_gz(tmp_path / "day_1.gz", [line.split("\t", 1)[1] for line in good[:50]]),  # no labels: test.txt's layout
        write_gz(tmp_path / "day_2.gz", []),
    ]  # fmt: skip
    config = CriteoImportConfig(dataset=dataset, ds=dt_date("2026-02-01"), files=tuple(map(str, files)),
                                home=spark_home, registry_dir=tmp_path / "registry")  # fmt: skip
    with pytest.raises(DataRefusedError) as info:
        criteo_import.run(spark, config)
    assert "2 of 3 days of the import were not published (2026-02-02, 2026-02-03)" in str(info.value)
    details = info.value.details
    assert "50 of 50 lines (100.00%) are malformed" in details and "no lines: the file is empty" in details
    table = spark.table(f"featurehouse.{dataset}")
    assert {r["ds"]: r["count"] for r in table.groupBy("ds").count().collect()} == {"2026-02-01": 400}
    assert table.where(F.col("impression_id") == "day_0.gz:202").count() == 1  # numbered past the bad line
    quarantined = [(r["ds"], r["line"], r["problem"]) for r in spark.table(f"featurehouse_quarantine.{dataset}").collect()]
    assert ("2026-02-01", 201, "field_count") in quarantined and ("2026-02-03", None, "empty_file") in quarantined
    assert sorted(q[1] for q in quarantined if q[0] == "2026-02-02") == list(range(1, 51))


def test_bad_commands_are_refused_with_the_fix(tmp_path):
    parse = criteo_import.parse_args
    with pytest.raises(ConfigError, match=r"--split-days 7 splits one file into days: give exactly one FILE \(got 2\)"):
        parse(["criteo", "a.txt", "b.txt", "--dataset", "c", "--ds", FIRST, "--split-days", "7"])
    with pytest.raises(ConfigError, match=r"dac.tar.gz is a tar archive .*tar xzf dac.tar.gz train.txt"):
        parse(["criteo", "/data/dac.tar.gz", "--dataset", "c", "--ds", FIRST])
    with pytest.raises(ConfigError, match=r"not in day order \(day_0.gz, day_10.gz, day_2.gz\).*day_\{0..23\}.gz"):
        parse(["criteo", "day_0.gz", "day_10.gz", "day_2.gz", "--dataset", "c", "--ds", FIRST])
    with pytest.raises(SystemExit):
        parse(["avazu", "a.txt", "--dataset", "c", "--ds", FIRST])  # argparse: invalid choice
    config = parse(["criteo", "day_0.gz", "day_1.gz", "--dataset", "c", "--ds", FIRST])
    assert [config.days(i) for i in (0, 1)] == [(dt_date(FIRST),), (dt_date("2026-01-02"),)]
    other = tmp_path / "c.yaml"
    other.write_text(yaml.safe_dump({"dataset": "c", "labels": [{"name": "click", "window": "1h"}], "features": [
        {"name": "int_1", "kind": "sparse", "dtype": "int64", "description": "x", "owner": "o"}]}))  # fmt: skip
    with pytest.raises(RegistryError, match=r"c.yaml exists but is not a Criteo registry: feature int_1 is sparse, "
                                            r"expected dense; feature int_2 is missing"):  # fmt: skip
        criteo_import.ensure_registry("c", tmp_path)
    assert split_sizes(45_840_617, 7) == [6_548_660] * 4 + [6_548_659] * 3


@pytest.mark.spark
def test_one_metrics_pass_judges_each_day_as_a_pass_of_its_own_with_a_refused_day_in_the_middle(
        spark, spark_home, tmp_path, monkeypatch):  # fmt: skip
    """Five days of one file from one metrics pass; day 3 is all clicks, so its positive rate fails against days 1-2,
    and day 4 is then judged against days 1-2 only, day 5 against 1, 2 and 4: the verdicts, observations and histories
    of each day equal those of validating that day's rows alone against the table, as separate passes did."""
    import json

    from pyspark.sql import functions as F

    from schemas.registry import load_dataset
    from warehouse import publish, quality

    dataset, days, per_day = "t_criteo_order", [f"2026-03-0{d}" for d in range(1, 6)], 400
    lines = [line for _label, line, _bad in sample_lines(len(days) * per_day, seed=11)]
    lines[2 * per_day: 3 * per_day] = ["1" + line[1:] for line in lines[2 * per_day: 3 * per_day]]  # day 3: all clicks
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    passes, validations = [], []
    monkeypatch.setattr(criteo_import, "metrics_by_day",
                        lambda *a, **k: passes.append(a[2]) or quality.metrics_by_day(*a, **k))  # fmt: skip
    monkeypatch.setattr(publish, "validate", lambda *a, **k: validations.append(a[2]) or quality.validate(*a, **k))
    config = CriteoImportConfig(dataset=dataset, ds=dt_date(days[0]), files=(str(path),), home=spark_home,
                                split_days=len(days), registry_dir=tmp_path / "registry")  # fmt: skip
    with pytest.raises(DataRefusedError, match=r"1 of 5 days of the import were not published \(2026-03-03\)"):
        criteo_import.run(spark, config)
    assert passes == [list(map(dt_date, days))] and validations == []  # one pass for the file's days, no other

    registry = load_dataset(dataset, tmp_path / "registry")
    table = f"featurehouse.{dataset}"
    gate = {r["ds"]: r for r in spark.table("featurehouse_catalog.quality_gate").where(F.col("dataset") == dataset)
            .collect()}  # fmt: skip
    assert {ds: r["decision"] for ds, r in gate.items()} == {d: "refused" if d == days[2] else "published" for d in days}
    for ds in days:
        rows = spark.table(gate[ds]["staging_table"] if ds == days[2] else table).where(F.col("ds") == ds)
        alone = quality.validate(rows, registry, dt_date(ds), quality.trailing_history(spark, table, registry, dt_date(ds)))
        imported = json.loads(Path(gate[ds]["report_path"]).read_text())
        assert imported["checks"] == [vars(c) for c in alone.checks], ds
        assert (imported["success"], tuple(imported["history_days"])) == (alone.success, alone.history_days), ds
        assert gate[ds]["rows"] == alone.rows == per_day
    assert [json.loads(Path(gate[d]["report_path"]).read_text())["history_days"] for d in days] == [
        [], days[:1], days[:2], days[:2], [*days[:2], days[3]]]
    failed = json.loads(Path(gate[days[2]]["report_path"]).read_text())["checks"]
    assert [(c["expectation"], c["column"], c["observed"]) for c in failed if not c["success"]] == [
        ("expect_column_mean_to_be_between", "label_click", "observed 1.0")]
