"""The benchmark suite's plumbing: timed rounds and pairwise ratios, the column-order measurement, and
`featurehouse bench` end to end on its cheapest section (no JVM): results.json, the plots and summary.md.

No timing is asserted: the figures are the benchmark's to report, not the tests'."""

from __future__ import annotations

import json

import pytest

from bench import column_order, common
from featurehouse import cli


def test_rounds_warm_up_then_rotate_and_ratios_pair_each_round():
    calls: list[str] = []
    clock = iter(range(1, 100))

    def contender(name: str):
        def run() -> dict:
            calls.append(name)
            return {"seconds": float(next(clock)) * (2 if name == "slow" else 1)}
        return run

    results = common.rounds({"fast": contender("fast"), "slow": contender("slow")}, 3)
    assert calls == ["fast", "slow", "slow", "fast", "fast", "slow", "slow", "fast"]  # warm-up, then rotating
    assert [r["seconds"] for r in results["fast"]] == [4.0, 5.0, 8.0]  # the warm-up round (1, 2) is left out
    assert [r["seconds"] for r in results["slow"]] == [6.0, 12.0, 14.0]
    r = common.ratio(results["slow"], results["fast"])
    assert r["runs"] == [6 / 4, 12 / 5, 14 / 8]
    assert r["median"] == 14 / 8  # the median of the rounds' ratios, not the ratio of the medians (12 / 5)
    assert common.summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "runs": [3.0, 1.0, 2.0]}


def test_rounds_refuse_fewer_than_three_runs():
    with pytest.raises(ValueError, match="at least 3 runs"):
        common.rounds({"x": dict}, 2)


def test_popularity_order_coalesces_the_demo_jobs_reads(tmp_path):
    out = column_order.section(tmp_path, rows=3_000, latency_ms=1.0, runs=3)
    demo = out["jobs"]["ctr-demo"]["results"]
    # the job's columns sit together in popularity order, so pyarrow's coalescing merges their ranges
    assert demo["popularity order, coalesced, +latency"]["requests"] < demo["registry order, coalesced, +latency"]["requests"]
    # one request per column chunk whatever the order, and the same bytes of the same columns either way
    assert demo["popularity order, per chunk, local"]["requests"] == demo["registry order, per chunk, local"]["requests"]
    assert demo["popularity order, per chunk, local"]["requests"] == len(out["jobs"]["ctr-demo"]["features"])
    assert out["popular_first"][0] == "position"  # the one feature both demo jobs read


def test_featurehouse_bench_writes_results_plots_and_summary(tmp_path):
    code = cli.main(["bench", "--quick", "--only", "column_order", "--out", str(tmp_path / "results"),
                     "--work", str(tmp_path / "work")])  # fmt: skip
    assert code == 0
    (folder,) = (tmp_path / "results").iterdir()
    assert folder.name.endswith("-quick")
    results = json.loads((folder / "results.json").read_text())
    assert results["mode"] == "quick" and results["runs"] == 3
    figures = results["sections"]["column_order"]
    assert "failed" not in figures and set(figures["jobs"]) == {"ctr-demo", "ctr-context"}
    png = (folder / "column_order.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    summary = (folder / "summary.md").read_text()
    assert "| column order, ctr-demo, coalesced reads" in summary and "![column_order.png](column_order.png)" in summary


def test_featurehouse_bench_refuses_fewer_runs(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--runs", "1"])
    assert "at least 3 runs" in capsys.readouterr().err


def test_featurehouse_bench_help_names_every_section(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for section in ("etl", "reader", "stall", "commits", "column_order", "--quick", "bench/results/<date>/"):
        assert section in text
