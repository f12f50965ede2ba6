"""``featurehouse bench``: every benchmark of bench/ in one run, written to bench/results/<date>/.

    featurehouse bench --quick          # smaller sizes: under 10 minutes on a 2-core machine
    featurehouse bench                  # the full suite: under 40 minutes there
    make bench                          # the same, after installing what it needs (Petastorm's venv too)

Sections, each in its own Python process (a fresh JVM, Ray instance and torch), in this order:

* ``etl``: the label join against a plain Spark job, DuckDB and Polars at 3 sizes (bench/label_join.py);
* ``reader``: the reader against pyarrow's floor, pyarrow reading all columns and Petastorm at 1%,
  10%, 50% and 100% of the features (bench/reader.py);
* ``stall``: DLRM steps fed by the reader and by DPP against in-memory batches (bench/dpp.py);
* ``commits``: Delta commit and table-open costs, micro-batches, OPTIMIZE, checkpoints (bench/commits.py);
* ``column_order``: popularity-ordered columns against registry order (bench/column_order.py).

Every figure is the median of at least 3 runs after a warm-up, with min and max; ratios are taken
round by round. Written: ``results.json`` (every figure, the machine, the versions, each section's
wall time), PNG plots and ``summary.md``. Progress goes to stderr as it runs. A section that fails
is recorded as failed with its error; the others still run, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SECTIONS = ("etl", "reader", "stall", "commits", "column_order")

#: Each section's sizes, for --quick and for the full suite (sized to this repo's 2-core reference machine).
PLANS: dict[str, dict[str, dict]] = {
    "quick": {
        "etl": {"sizes": [2_000], "startup_too": False},
        "reader": {"rows": 20_000},
        "stall": {"rows": 20_000, "steps": 6, "local_workers": [0, 2], "dpp_workers": [1]},
        "commits": {"commit_counts": [20, 200], "rows": 500},
        "column_order": {"rows": 40_000},
    },
    "full": {
        "etl": {"sizes": [20_000, 40_000, 80_000], "startup_too": True},
        "reader": {"rows": 200_000},
        "stall": {"rows": 200_000, "steps": 30, "local_workers": [0, 1, 2], "dpp_workers": [1, 2]},
        "commits": {"commit_counts": [20, 200], "rows": 500},
        "column_order": {"rows": 200_000},
    },
}


def run_section(name: str, params: dict, work: Path, runs: int) -> dict:
    """One section in this process: its figures."""
    work.mkdir(parents=True, exist_ok=True)
    if name == "etl":
        from bench import label_join

        return label_join.section(work / "etl", sizes=tuple(params["sizes"]), runs=runs, startup_too=params["startup_too"])
    if name == "reader":
        from bench import reader

        return reader.section(work / "tables", rows=params["rows"], runs=runs,
                              petastorm_python=params.get("petastorm_python"))  # fmt: skip
    if name == "stall":
        from bench import dpp

        return dpp.section(work / "tables", rows=params["rows"], steps=params["steps"], runs=runs,
                           local_workers=tuple(params["local_workers"]), dpp_workers=tuple(params["dpp_workers"]))
    if name == "commits":
        import shutil

        from bench import commits

        shutil.rmtree(work / "commits", ignore_errors=True)  # the table's history is the thing measured: fresh
        (work / "commits").mkdir(parents=True)
        return commits.section(work / "commits", commit_counts=tuple(params["commit_counts"]), rows=params["rows"],
                               runs=runs)  # fmt: skip
    if name == "column_order":
        from bench import column_order

        return column_order.section(work / "column_order", rows=params["rows"], runs=runs)
    raise ValueError(f"unknown section {name!r}; the sections are {', '.join(SECTIONS)}")


def machine() -> dict:
    """What the figures were measured on."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    mem = next((int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), None)  # fmt: skip
    versions = {}
    for package in ("pyspark", "delta-spark", "deltalake", "pyarrow", "duckdb", "polars", "torch", "ray", "numpy"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    flags = Path("/proc/cpuinfo").read_text()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_mib": mem, "python": platform.python_version(),
            "avx512": " avx512f" in flags, "versions": versions}  # fmt: skip


def child(name: str, params: dict, answer: Path, ns: argparse.Namespace) -> tuple[int, str]:
    """Run one section in a fresh process; pass its progress lines on as they come; (exit status, its last lines)."""
    command = [sys.executable, "-m", "bench.suite", "--section", name, "--params", json.dumps(params), "--json", str(answer),
               "--work", str(ns.work), "--runs", str(ns.runs)]  # fmt: skip
    tail: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO) as proc:
        for line in proc.stdout:
            tail = [*tail[-29:], line.rstrip()]
            if line.startswith("["):  # bench/common.py's say(); Spark's and Ray's log lines stay out
                sys.stderr.write(line)
                sys.stderr.flush()
    return proc.returncode, "\n".join(tail)


def petastorm_python(given: str | None) -> str | None:
    if given:
        return given
    default = REPO / ".venv-petastorm" / "bin" / "python"
    return str(default) if default.exists() else None


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="featurehouse bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the smaller sizes (under 10 minutes on 2 cores)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=None, help="run only these sections")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of every figure after a warm-up (at least 3)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results",
                        help="results go into OUT/<date>/ (OUT/<date>-quick/ with --quick); default: %(default)s")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "featurehouse-bench",
                        help="scratch space for generated logs and tables, kept as a cache (default: %(default)s)")
    parser.add_argument("--petastorm-python", default=None,
                        help="python of a venv with petastorm (default: .venv-petastorm/bin/python if present)")
    parser.add_argument("--redraw", type=Path, default=None, metavar="FOLDER",
                        help="run nothing: draw the plots and write summary.md again from FOLDER/results.json")
    parser.add_argument("--section", default=None, help=argparse.SUPPRESS)  # internal: run one section here
    parser.add_argument("--params", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def redraw(folder: Path, parser: argparse.ArgumentParser) -> int:
    """The plots and summary.md of ``folder`` again, from its results.json."""
    from bench import report

    source = folder / "results.json"
    if not source.exists():
        parser.error(f"--redraw {folder}: no results.json there; pass a folder featurehouse bench wrote")
    results = json.loads(source.read_text())
    (folder / "summary.md").write_text(report.markdown(results, report.plots(results, folder)))
    print(folder / "summary.md")
    return 0


def run_one(number: int, name: str, params: dict, results: dict, began: float, count: int,
            ns: argparse.Namespace) -> bool:  # fmt: skip
    """Section ``name`` in a child process, its figures (or its failure) and wall time into ``results``;
    its progress lines as it runs. Whether it succeeded."""
    from bench import report

    print(f"featurehouse bench: section {number}/{count}: {name} {json.dumps(params)}", file=sys.stderr,
          flush=True)  # fmt: skip
    started = time.perf_counter()
    with tempfile.NamedTemporaryFile(suffix=".json") as answer:
        status, tail = child(name, params, Path(answer.name), ns)
        text = Path(answer.name).read_text()
    results["wall_s"][name] = time.perf_counter() - started
    ok = bool(text) and not status
    if not ok:
        results["sections"][name] = {"failed": f"exit status {status}: {tail}"}
        print(f"featurehouse bench: section {name} FAILED (exit {status}):\n{tail}", file=sys.stderr)
    else:
        results["sections"][name] = json.loads(text) | {"params": params}
        print(report.section_text(name, results["sections"][name]), file=sys.stderr, flush=True)
    print(f"featurehouse bench: section {name} took {results['wall_s'][name]:.0f}s "
          f"({time.perf_counter() - began:.0f}s so far)", file=sys.stderr, flush=True)  # fmt: skip
    return ok


def run_suite(ns: argparse.Namespace) -> int:
    """The chosen sections one after another, then results.json, the plots and summary.md."""
    from bench import report

    mode = "quick" if ns.quick else "full"
    out = ns.out / (dt.date.today().isoformat() + ("-quick" if ns.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    chosen = ns.only or list(SECTIONS)
    results: dict = {"mode": mode, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "runs": ns.runs,
                     "machine": machine(), "sections": {}, "wall_s": {}}  # fmt: skip
    began = time.perf_counter()
    failed = []
    for number, name in enumerate(chosen, 1):
        params = dict(PLANS[mode][name])
        if name == "reader":
            params["petastorm_python"] = petastorm_python(ns.petastorm_python)
        if not run_one(number, name, params, results, began, len(chosen), ns):
            failed.append(name)
    results["wall_s"]["total"] = time.perf_counter() - began
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plots = report.plots(results, out)
    (out / "summary.md").write_text(report.markdown(results, plots))
    print(f"featurehouse bench: {mode} suite took {results['wall_s']['total'] / 60:.1f} min; wrote "
          f"{out / 'results.json'}, {out / 'summary.md'} and {len(plots)} plots", file=sys.stderr)  # fmt: skip
    print(out / "summary.md")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parser()
    ns = args.parse_args(argv)
    if ns.runs < 3:
        args.error(f"--runs {ns.runs}: every figure is the median of at least 3 runs after a warm-up; pass 3 or more")
    if ns.section:  # the child process of one section
        result = run_section(ns.section, json.loads(ns.params), ns.work, ns.runs)
        ns.json.write_text(json.dumps(result, indent=1))
        return 0

    from bench import report

    report.check_plotting()  # before any minute is spent: matplotlib is needed at the end
    if ns.redraw:
        return redraw(ns.redraw, args)
    return run_suite(ns)


if __name__ == "__main__":
    raise SystemExit(main())
