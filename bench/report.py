"""The suite's figures as text, PNG plots (matplotlib) and a Markdown summary (bench/suite.py writes them)."""

from __future__ import annotations

from pathlib import Path

ETL_NAMES = {"a": "featurehouse label-join", "s": "featurehouse --no-stats", "b": "plain Spark job", "c": "DuckDB",
             "d": "Polars"}
READER_NAMES = {"a": "featurehouse reader", "b": "pyarrow floor (projected, 1 thread)", "c": "pyarrow, all columns",
                "d": "Petastorm"}  # fmt: skip


def check_plotting() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise SystemExit("featurehouse bench: matplotlib is not installed; it draws the plots. Install the bench "
                         "extra: .venv/bin/pip install -e '.[bench]' (make bench does it)") from err


def section_text(name: str, figures: dict) -> str:
    """The section's own printed report."""
    if "failed" in figures:
        return f"{name}: FAILED: {figures['failed']}"
    if name == "etl":
        from bench import label_join

        return label_join.report(figures)
    if name == "reader":
        from bench import reader

        return reader.section_report(figures)
    if name == "stall":
        from bench import dpp

        return dpp.section_report(figures)
    if name == "commits":
        from bench import commits

        return commits.report(figures)
    from bench import column_order

    return column_order.report(figures)


def _fmt(f: dict, digits: int = 2, unit: str = "") -> str:
    return f"{f['median']:.{digits}f}{unit} [{f['min']:.{digits}f}..{f['max']:.{digits}f}]"


# --------------------------------------------------------------------------- plots


def plots(results: dict, out: Path) -> list[str]:
    """Write one PNG per section that ran; their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    sections = {k: v for k, v in results["sections"].items() if "failed" not in v}
    for name, draw in (("etl", _etl), ("reader", _reader), ("stall", _stall), ("commits", _commits),
                       ("column_order", _column_order)):  # fmt: skip
        if name not in sections:
            continue
        fig = draw(plt, sections[name])
        fig.text(0.99, 0.01, f"{results['machine']['cpu']}, {results['machine']['cores']} cores; median of "
                 f"{results['runs']} runs, bars min..max", ha="right", fontsize=7, color="grey")  # fmt: skip
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        fig.savefig(out / f"{name}.png", dpi=110)
        plt.close(fig)
        written.append(f"{name}.png")
    return written


def _errorbar(ax, xs, figs, **style):
    medians = [f["median"] for f in figs]
    lower = [f["median"] - f["min"] for f in figs]
    upper = [f["max"] - f["median"] for f in figs]
    ax.errorbar(xs, medians, yerr=[lower, upper], capsize=3, marker="o", **style)


def _etl(plt, s: dict):
    fig, (cost, memory) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = [int(x) for x in s["by_size"]]
    for index, (key, name) in enumerate(ETL_NAMES.items()):
        if key not in s["by_size"][str(sizes[0])]:
            continue
        color = f"C{index}"
        _errorbar(cost, sizes, [s["by_size"][str(n)][key]["seconds"] for n in sizes], color=color, label=name)
        if "with_startup" in s["by_size"][str(sizes[0])][key]:
            _errorbar(cost, sizes, [s["by_size"][str(n)][key]["with_startup"] for n in sizes], color=color,
                      linestyle="--", alpha=0.6, label=f"{name}, with start-up")  # fmt: skip
        _errorbar(memory, sizes, [s["by_size"][str(n)][key]["peak_mib"] for n in sizes], color=color, label=name)
    cost.set(xscale="log", yscale="log", xlabel="impressions in the day (log)", ylabel="seconds (log)",
             title="Label join: time against size (one day of ads logs, JSON to Delta/Parquet)")  # fmt: skip
    cost.legend(fontsize=7)
    memory.set(xscale="log", xlabel="impressions in the day (log)", ylabel="peak resident MiB of the worker process",
               title="Peak memory (JVM for the Spark jobs)")  # fmt: skip
    memory.legend(fontsize=7)
    return fig


def _reader(plt, s: dict):
    fig, (speed, volume) = plt.subplots(1, 2, figsize=(11, 4.2))
    fractions = [float(f) for f in s["by_fraction"]]
    percent = [100 * f for f in fractions]
    for index, (key, name) in enumerate(READER_NAMES.items()):
        figs = [s["by_fraction"][str(f)].get(key, {}) for f in fractions]
        if not figs or any("samples_per_s" not in f for f in figs):
            continue
        _errorbar(speed, percent, [f["samples_per_s"] for f in figs], color=f"C{index}", label=name)
        if all(f.get("bytes") for f in figs):
            volume.plot(percent, [f["bytes"] / 2**20 for f in figs], marker="o", color=f"C{index}", label=name)
    volume.plot(percent, [s["by_fraction"][str(f)]["requested_bytes"] / 2**20 for f in fractions], color="black",
                linestyle=":", label="the requested columns' compressed bytes")  # fmt: skip
    speed.set(xscale="log", yscale="log", xlabel="% of the 120 features the job reads (log)",
              ylabel="samples/s (log)", title=f"Reader: samples/s, {s['rows']:,} rows")  # fmt: skip
    speed.legend(fontsize=7)
    volume.set(xscale="log", yscale="log", xlabel="% of the features (log)", ylabel="MiB read (log)",
               title="Bytes read")  # fmt: skip
    volume.legend(fontsize=7)
    return fig


def _stall(plt, s: dict):
    fig, (stall, speed) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups = {"reader in process (DataLoader workers)": "reader, ", "DPP (Ray workers)": "DPP, "}
    for index, (name, prefix) in enumerate(groups.items()):
        rows = [(int(label.split(", ")[1].split()[0]), f) for label, f in s["feeders"].items() if label.startswith(prefix)]
        if rows:
            _errorbar(stall, [w for w, _ in rows], [{k: 100 * v for k, v in f["stall"].items() if k != "runs"}
                                                     for _, f in rows], color=f"C{index}", label=name)  # fmt: skip
    stall.set(xlabel="workers", ylabel="stall, % of step time waiting for data", title="Trainer stall against workers")
    stall.legend(fontsize=7)
    labels = list(s["feeders"])
    medians = [s["feeders"][k]["samples_per_s"]["median"] for k in labels]
    speed.barh(range(len(labels)), medians, color=["C2" if "memory" in k else "C0" if "reader" in k else "C1"
                                                   for k in labels])  # fmt: skip
    speed.set_yticks(range(len(labels)), labels, fontsize=7)
    speed.set(xlabel="samples/s (median)", title=f"DLRM steps on {s['device']}: samples/s by feeder")
    return fig


def _commits(plt, s: dict):
    fig, (opens, commit) = plt.subplots(1, 2, figsize=(11, 4.2))
    points = list(s["at"])
    for index, engine in enumerate(("Spark", "deltalake")):
        figs = [s["at"][p][f"{engine} open"] for p in points]
        opens.bar([i + 0.4 * index for i in range(len(points))], [1000 * f["median"] for f in figs], width=0.4,
                  yerr=[[1000 * (f["median"] - f["min"]) for f in figs], [1000 * (f["max"] - f["median"]) for f in figs]],
                  capsize=3, label=f"{engine} open", color=f"C{index}")  # fmt: skip
        counts = [p for p in points if "checkpoint" not in p]
        _errorbar(commit, [int(p) for p in counts], [{k: 1000 * v for k, v in s["at"][p][f"{engine} commit"].items()
                                                       if k != "runs"} for p in counts], color=f"C{index}",
                  label=f"{engine} commit")  # fmt: skip
    opens.set_xticks([i + 0.2 for i in range(len(points))], [f"{p} commits" for p in points], fontsize=8)
    opens.set(ylabel="ms", title="Opening the table (snapshot) after N commits")
    opens.legend(fontsize=7)
    commit.set(xscale="log", xlabel="commits already in the log (log)", ylabel="ms per commit",
               title=f"One more commit of {s['rows_per_commit']} rows")  # fmt: skip
    commit.legend(fontsize=7)
    return fig


def _column_order(plt, s: dict):
    fig, (requests, seconds) = plt.subplots(1, 2, figsize=(11, 4.2))
    jobs = list(s["jobs"])
    bars = [("registry order", "coalesced"), ("popularity order", "coalesced"), ("registry order", "per chunk"),
            ("popularity order", "per chunk")]  # fmt: skip
    for index, (order, kind) in enumerate(bars):
        xs = [j + 0.2 * index for j in range(len(jobs))]
        r = [s["jobs"][j]["results"][f"{order}, {kind}, +latency"] for j in jobs]
        requests.bar(xs, [x["requests"] for x in r], width=0.2, label=f"{order}, {kind}", color=f"C{index}")
        seconds.bar(xs, [x["seconds"]["median"] for x in r], width=0.2, label=f"{order}, {kind}", color=f"C{index}",
                    yerr=[[x["seconds"]["median"] - x["seconds"]["min"] for x in r],
                          [x["seconds"]["max"] - x["seconds"]["median"] for x in r]], capsize=3)  # fmt: skip
    for ax in (requests, seconds):
        ax.set_xticks([j + 0.3 for j in range(len(jobs))], jobs)
        ax.legend(fontsize=7)
    requests.set(ylabel="read requests after the footers", title="Read requests for the demo's jobs")
    seconds.set(ylabel="seconds", title=f"Read time with {s['latency_ms']:g} ms added per request")
    return fig


# --------------------------------------------------------------------------- the Markdown summary


def headline(results: dict) -> list[tuple[str, str, str, str]]:
    """(what, featurehouse, peer, ratio) rows of the summary table."""
    rows = []
    s = results["sections"]
    if "by_size" in s.get("etl", {}):
        for size, by in s["etl"]["by_size"].items():
            a = by["a"]["seconds"]
            for key in ("s", "b", "c", "d"):
                if key in by:
                    rows.append((f"label join, {int(size):,} impressions: time", f"{a['median']:.1f} s",
                                 f"{ETL_NAMES[key]} {by[key]['seconds']['median']:.1f} s",
                                 f"{_fmt(by[key]['a/this'])}x the peer's time" + (f"; with start-up {by[key]['a/this with start-up']['median']:.2f}x"
                                                                  if "a/this with start-up" in by[key] else "")))
    if "by_fraction" in s.get("reader", {}):
        for fraction, r in s["reader"]["by_fraction"].items():
            a = r["a"]["samples_per_s"]["median"]
            for key in ("b", "c", "d"):
                if key in r and "a_speedup" in r[key]:
                    rows.append((f"reader, {float(fraction):.0%} of 120 features: samples/s", f"{a:,.0f}",
                                 f"{READER_NAMES[key]} {r[key]['samples_per_s']['median']:,.0f}",
                                 f"{_fmt(r[key]['a_speedup'])}x the peer's samples/s"
                                 + (f" ({r[key]['warning']})" if "warning" in r[key] else "")))
    if "feeders" in s.get("stall", {}):
        for label, f in s["stall"]["feeders"].items():
            if "ceiling" in label:
                continue
            rows.append((f"trainer fed by {label}: stall", f"{f['stall']['median']:.1%}",
                         f"in-memory batches {s['stall']['feeders']['in-memory batches (ceiling)']['samples_per_s']['median']:,.0f} samples/s",
                         f"{_fmt(f['of_ceiling'])}x the ceiling's samples/s"))
    if "at" in s.get("commits", {}):
        c = s["commits"]
        last = str(c["commit_counts"][-1])
        for engine in ("Spark", "deltalake"):
            first, many, ck = (c["at"][p][f"{engine} open"]["median"] for p in (str(c["commit_counts"][0]), last,
                                                                                last + "+checkpoint"))  # fmt: skip
            rows.append((f"{engine} table open after {c['commit_counts'][0]} / {last} commits / + checkpoint",
                         f"{1000 * first:.0f} / {1000 * many:.0f} / {1000 * ck:.0f} ms", "-",
                         f"checkpoint recovers {many / ck:.2f}x"))
        rows.append((f"scan after {c['scan']['files_before']} micro-batch files vs OPTIMIZE",
                     f"{c['scan']['before']['median']:.2f} s / {c['scan']['after']['median']:.2f} s", "-",
                     f"OPTIMIZE recovers {_fmt(c['scan']['before/after'])}x"))  # fmt: skip
    if "jobs" in s.get("column_order", {}):
        co = s["column_order"]
        for job, j in co["jobs"].items():
            r = j["results"]
            rows.append((f"column order, {job}, coalesced reads, +{co['latency_ms']:g} ms a request",
                         f"popularity: {r['popularity order, coalesced, +latency']['requests']} requests",
                         f"registry order: {r['registry order, coalesced, +latency']['requests']} requests",
                         f"popularity order reads in {1 / r['registry/popularity, coalesced, +latency']['median']:.2f}x the time "
                         f"(registry / popularity {_fmt(r['registry/popularity, coalesced, +latency'])}x)"))
    return rows


def targets(results: dict) -> list[tuple[str, str, str, str]]:
    """(target, from, measured, met?) for the targets earlier issues set."""
    rows = []
    s = results["sections"]
    if "by_size" in s.get("etl", {}):
        biggest = s["etl"]["by_size"][max(s["etl"]["by_size"], key=int)]
        if "b" in biggest:
            r = biggest["b"]["a/this"]["median"]
            top = int(max(s["etl"]["by_size"], key=int))
            rows.append(("label join at most 1.5x a plain Spark job (at 1M impressions)", "issue 14",
                         f"{r:.2f}x at {top:,} impressions", _met(r <= 1.5)))
            rate = biggest["a"]["rows_per_s"]["median"]
            rows.append(("label join at least 10,000 rows/s (at 1M impressions)", "issue 14",
                         f"{rate:,.0f} rows/s at {top:,}", _met(rate >= 10_000)))
        steps = biggest["a"].get("steps", {})
        gate = sum(steps[k]["median"] for k in ("validating", "publishing") if k in steps)
        if gate:
            share = gate / biggest["a"]["seconds"]["median"]
            rows.append(("quality gate (validate + publish) at most 25% of the label join (at 1M)", "issue 14",
                         f"{share:.0%}", _met(share <= 0.25)))
    if "by_fraction" in s.get("reader", {}):
        ten = s["reader"]["by_fraction"].get("0.1")
        if ten:
            floor = ten["b"]["a_speedup"]["median"]  # the reader's samples/s over the floor's, round by round
            rows.append(("reader at least 0.7x the pyarrow floor at 10% of the features", "issue 17",
                         f"{floor:.2f}x", _met(floor >= 0.7)))
            if "a_speedup" in ten.get("d", {}):
                r = ten["d"]["a_speedup"]["median"]
                rows.append(("reader at least 3x Petastorm", "issue 4", f"{r:.2f}x at 10%", _met(r >= 3)))
            rows.append(("bytes read at most 1.1x the requested columns'", "issues 4, 17",
                         f"{ten['a']['bytes'] / ten['requested_bytes']:.3f}x", _met(ten["a"]["bytes"] <= 1.1 * ten["requested_bytes"])))
    if "feeders" in s.get("stall", {}):
        f = s["stall"]["feeders"].get("reader, 0 DataLoader workers")
        if f:
            rows.append(("trainer stall below 5% with the in-process reader (set for the demo's job)", "issue 17",
                         f"{f['stall']['median']:.1%} (the bench table's DLRM)", _met(f["stall"]["median"] < 0.05)))
    return rows


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def at_a_glance(results: dict) -> list[str]:
    """Compact Markdown tables of the main comparisons (the README shows them): medians, ratios round by round."""
    s, lines = results["sections"], []
    if "by_size" in s.get("etl", {}):
        keys = [k for k in ETL_NAMES if k in next(iter(s["etl"]["by_size"].values()))]
        lines += ["| label join, one day of | " + " | ".join(ETL_NAMES[k] for k in keys) + " |",
                  "|---" * (len(keys) + 1) + "|"]  # fmt: skip
        for size, by in s["etl"]["by_size"].items():
            cells = [f"{by['a']['seconds']['median']:.1f} s" + (f" ({by['a']['with_startup']['median']:.1f} s with start-up)"
                                                                 if "with_startup" in by["a"] else "")]  # fmt: skip
            for k in keys[1:]:
                start = f", {by[k]['a/this with start-up']['median']:.2f}x with start-ups" if "a/this with start-up" in by[k] else ""
                cells.append(f"{by[k]['seconds']['median']:.1f} s: featurehouse takes {by[k]['a/this']['median']:.2f}x{start}")
            lines.append(f"| {int(size):,} impressions | " + " | ".join(cells) + " |")
        lines += ["", "Each peer's cell: its time, and featurehouse's time over it (the median of the rounds' ratios; "
                  "with start-ups: each engine's start in a fresh process added to both).", ""]  # fmt: skip
    if "by_fraction" in s.get("reader", {}):
        keys = [k for k in READER_NAMES if k in next(iter(s["reader"]["by_fraction"].values()))]
        lines += ["| reader, share of 120 features | " + " | ".join(READER_NAMES[k] for k in keys) + " |",
                  "|---" * (len(keys) + 1) + "|"]  # fmt: skip
        for fraction, r in s["reader"]["by_fraction"].items():
            cells = [f"{r['a']['samples_per_s']['median']:,.0f} samples/s"]
            cells += [f"{r[k]['samples_per_s']['median']:,.0f}: featurehouse {r[k]['a_speedup']['median']:.2f}x" if "a_speedup" in r[k]
                      else "not run" for k in keys[1:]]  # fmt: skip
            lines.append(f"| {float(fraction):.0%} | " + " | ".join(cells) + " |")
        lines += ["", "Each peer's cell: its samples/s, and featurehouse's samples/s over it (the median of the rounds' "
                  "ratios). The floor only decodes the columns into numpy: no transforms, shuffle or batches.", ""]  # fmt: skip
    return lines


def markdown(results: dict, plots: list[str]) -> str:
    m = results["machine"]
    lines = [f"# featurehouse bench ({results['mode']}), {results['date']}", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_mib']:,} MiB, AVX-512 "
             f"{'yes' if m['avx512'] else 'no'}; Python {m['python']}; "
             + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v) + ".",
             "", f"Every figure is the median of {results['runs']} runs after a warm-up, [min..max]; ratios are "
             "taken round by round in the same run. Made by `featurehouse bench"
             + (" --quick" if results["mode"] == "quick" else "") + f"` in {results['wall_s']['total'] / 60:.1f} min "
             "(" + ", ".join(f"{k} {v:.0f} s" for k, v in results["wall_s"].items() if k != "total") + "). "
             "Every figure is in `results.json`.", "",
             "Sizes: " + "; ".join(f"{k} " + ", ".join(f"{p} {v}" for p, v in sec.get("params", {}).items()
                                                   if p != "petastorm_python")
                                   for k, sec in results["sections"].items()) + ".", "",
             "## At a glance", "", *at_a_glance(results), "## Every comparison", "",
             "| what | featurehouse | peer | featurehouse against the peer, median [min..max] of the rounds |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in headline(results)]
    tgt = targets(results)
    if tgt:
        lines += ["", "## Targets set by earlier issues", "", "| target | set in | measured | |", "|---|---|---|---|"]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in tgt]
    if results.get("notes"):
        lines += ["", "## Notes on this run", ""] + [f"- {note}" for note in results["notes"]]
    failed = [k for k, v in results["sections"].items() if "failed" in v]
    if failed:
        lines += ["", "## Sections that failed", ""] + [f"- {k}: `{results['sections'][k]['failed'][-300:]}`"
                                                       for k in failed]  # fmt: skip
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += ["", "## Each section's report", ""]
    for name, figures in results["sections"].items():
        lines += [f"### {name}", "", "```", section_text(name, figures), "```", ""]
    return "\n".join(lines) + "\n"
