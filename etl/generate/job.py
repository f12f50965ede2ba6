"""Generate seeded impression and label logs into the landing zone (``featurehouse generate``).

Writes JSON lines (formats: ``schemas.spark.impression_event_schema`` and
``label_event_schema``) for exactly the features of a registry, partitioned by each
record's own UTC event time::

    HOME/landing/impressions/ds=2026-11-01/hour=13/part-00000.jsonl
    HOME/landing/impressions/ds=2026-11-01/_SUCCESS
    HOME/landing/labels/ds=2026-11-04/hour=02/part-00000.jsonl

Each ds folder is written into a hidden sibling (``.ds=2026-11-01.tmp``) and renamed into
place with ``_SUCCESS`` already in it, so a reader never sees half a partition; a rerun
replaces the folders it writes, and the same config writes the same bytes. Label
partitions go on past the last impression day until the longest label window of its
last impression has closed. The data carries at-least-once duplicates, orphan labels,
late labels and a planted click signal (``etl/generate/world.py``) that features carry
(``etl/generate/features.py``).

Example::

    python -m etl.generate.job --home /tmp/fh --days 2 --impressions-per-day 5000
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tabulate import tabulate

from etl.generate import features as gf
from etl.generate import jsonl as gj
from etl.generate import world as gw
from schemas.paths import default_home
from schemas.config import HALF_FRACTION, NON_NEGATIVE_INT, POSITIVE_INT, LandingDaysConfig, satisfies
from schemas.errors import ConfigError
from schemas.exit import run_command
from schemas.names import format_ds, parse_ds
from schemas.progress import Progress, silent
from schemas.registry import DatasetRegistry, load_dataset

CHUNK_ROWS = 4096  # rows rendered at a time (bounds memory)
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True, kw_only=True)
class GenerateConfig(LandingDaysConfig):
    """What to generate and where; validated on construction."""

    dataset: str = "ads"
    registry_dir: Path | None = None
    start: dt.date = dt.date(2026, 11, 1)
    days: int = 7
    impressions_per_day: int = 20_000
    users: int = 50_000
    items: int = 20_000
    seed: int = 7
    duplicate_rate: float = 0.01
    orphan_rate: float = 0.005

    def __post_init__(self) -> None:
        for name in ("days", "impressions_per_day", "users", "items", "seed"):  # a numpy int is a whole number too
            if isinstance(getattr(self, name), np.integer):
                object.__setattr__(self, name, int(getattr(self, name)))
        super().__post_init__()
        if self.registry_dir is not None:
            object.__setattr__(self, "registry_dir", Path(self.registry_dir))
        for flag, value in (("impressions-per-day", self.impressions_per_day), ("users", self.users),
                            ("items", self.items)):  # fmt: skip
            if not satisfies(value, POSITIVE_INT):
                raise ConfigError(f"--{flag} must be a positive whole number, got {value!r}")
        if not satisfies(self.seed, NON_NEGATIVE_INT):
            raise ConfigError(f"--seed must be a whole number >= 0, got {self.seed!r}")
        for flag, rate in (("duplicate-rate", self.duplicate_rate), ("orphan-rate", self.orphan_rate)):
            if not satisfies(rate, HALF_FRACTION):
                raise ConfigError(f"--{flag} must be a fraction between 0 and 0.5, got {rate!r}")


@dataclass(frozen=True)
class ImpressionDay:
    """One impression partition, as written. Clicks count impressions with a written label of the
    registry's first type; conversions those with a written label of any other type."""

    ds: str
    written: int
    distinct: int
    duplicates: int
    clicks: int
    conversions: int
    files: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class LabelDay:
    """One label partition, as written (line counts include duplicate copies)."""

    ds: str
    written: int
    by_type: tuple[tuple[str, int], ...]
    duplicates: int
    orphans: int
    outside_window: int
    files: int
    bytes: int


@dataclass(frozen=True)
class GenerateSummary:
    """What ``run`` wrote, counted from the written records."""

    landing: Path
    dataset: str
    impression_days: tuple[ImpressionDay, ...]
    label_days: tuple[LabelDay, ...]
    labels_past_horizon: int  # drawn labels later than the last label partition: not written
    elapsed_s: float

    def _sum(self, days: tuple, field: str) -> int:
        return sum(getattr(day, field) for day in days)

    @property
    def impressions_written(self) -> int:
        return self._sum(self.impression_days, "written")

    @property
    def distinct_impressions(self) -> int:
        return self._sum(self.impression_days, "distinct")

    @property
    def clicks(self) -> int:
        return self._sum(self.impression_days, "clicks")

    @property
    def conversions(self) -> int:
        return self._sum(self.impression_days, "conversions")

    @property
    def duplicate_impressions(self) -> int:
        return self._sum(self.impression_days, "duplicates")

    @property
    def labels_written(self) -> int:
        return self._sum(self.label_days, "written")

    @property
    def duplicate_labels(self) -> int:
        return self._sum(self.label_days, "duplicates")

    @property
    def orphan_labels(self) -> int:
        return self._sum(self.label_days, "orphans")

    @property
    def labels_outside_window(self) -> int:
        return self._sum(self.label_days, "outside_window")

    @property
    def files(self) -> int:
        return self._sum(self.impression_days, "files") + self._sum(self.label_days, "files")

    @property
    def bytes_written(self) -> int:
        return self._sum(self.impression_days, "bytes") + self._sum(self.label_days, "bytes")

    def format(self) -> str:
        """A short multi-line report for people."""
        imp, lab, n = self.impression_days, self.label_days, max(self.distinct_impressions, 1)
        types = {}
        for day in lab:
            for name, count in day.by_type:
                types[name] = types.get(name, 0) + count
        lines = [
            f"generated {self.dataset} into {self.landing} in {self.elapsed_s:.1f}s "
            f"({self.impressions_written / max(self.elapsed_s, 1e-9):,.0f} impressions/s), "
            f"{self.files:,} files, {self.bytes_written / 1e6:,.1f} MB",
            f"impressions: {len(imp)} partitions {imp[0].ds}..{imp[-1].ds}, {self.impressions_written:,} lines "
            f"({self.distinct_impressions:,} distinct + {self.duplicate_impressions:,} duplicates)",
            f"labels:      {len(lab)} partitions {lab[0].ds}..{lab[-1].ds}, {self.labels_written:,} lines "
            f"({', '.join(f'{k} {v:,}' for k, v in types.items())}; {self.duplicate_labels:,} duplicates, "
            f"{self.orphan_labels:,} orphans, {self.labels_outside_window:,} outside their window)",
            f"click rate {self.clicks / n:.2%}, conversion rate {self.conversions / n:.2%} of impressions; "
            f"{self.labels_past_horizon:,} labels fell after {lab[-1].ds} and were not written",
        ]
        by_ds = {day.ds: day for day in lab}
        rows = []
        for ds in sorted({day.ds for day in imp} | set(by_ds)):
            day = next((d for d in imp if d.ds == ds), None)
            cells = (day.written, day.clicks, day.conversions) if day else (None, None, None)  # a label-only day
            rows.append((ds, *cells, by_ds[ds].written if ds in by_ds else 0))
        lines.append(tabulate(rows, headers=("ds", "impressions", "clicks", "conversions", "label lines"),
                              tablefmt="plain", intfmt=","))  # fmt: skip
        return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the generator's flags to ``parser`` (the CLI mounts them as ``featurehouse generate``)."""
    d = GenerateConfig(home=Path("."))
    parser.add_argument("--home", type=Path, default=None,
                        help="data folder; logs go to HOME/landing (default: $FEATUREHOUSE_HOME, else this checkout's data/)")
    parser.add_argument("--dataset", default=d.dataset, help="registry whose features to generate (default: %(default)s)")
    parser.add_argument("--registry-dir", type=Path, default=None,
                        help="folder of registry YAML files (default: schemas/datasets)")
    parser.add_argument("--start", default=format_ds(d.start), help="first impression ds, YYYY-MM-DD (default: %(default)s)")
    parser.add_argument("--days", type=int, default=d.days, help="impression days to generate (default: %(default)s)")
    parser.add_argument("--impressions-per-day", type=int, default=d.impressions_per_day,
                        help="distinct impressions per day (default: %(default)s)")
    parser.add_argument("--users", type=int, default=d.users, help="number of user ids (default: %(default)s)")
    parser.add_argument("--items", type=int, default=d.items, help="number of item ids (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed, help="random seed; same seed, same bytes (default: %(default)s)")
    parser.add_argument("--duplicate-rate", type=float, default=d.duplicate_rate,
                        help="share of impressions and labels written twice, 0..0.5 (default: %(default)s)")
    parser.add_argument("--orphan-rate", type=float, default=d.orphan_rate,
                        help="orphan labels (unknown impression id) as a share of labels, 0..0.5 (default: %(default)s)")
    return parser  # fmt: skip


def config_from_args(ns: argparse.Namespace) -> GenerateConfig:
    """Build the config from parsed flags; raises ConfigError for bad values."""
    home = ns.home or default_home()
    return GenerateConfig(
        home=Path(home), dataset=ns.dataset, registry_dir=ns.registry_dir, start=parse_ds(ns.start, what="--start"),
        days=ns.days, impressions_per_day=ns.impressions_per_day, users=ns.users, items=ns.items, seed=ns.seed,
        duplicate_rate=ns.duplicate_rate, orphan_rate=ns.orphan_rate,
    )  # fmt: skip


def parse_args(argv: list[str] | None = None) -> GenerateConfig:
    parser = argparse.ArgumentParser(
        prog="featurehouse generate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Generate seeded synthetic impression and label logs (JSON lines) for the features of a\n"
        "dataset's registry, partitioned by each record's UTC event time:\n\n"
        "  HOME/landing/impressions/ds=YYYY-MM-DD/hour=HH/part-00000.jsonl\n"
        "  HOME/landing/labels/ds=YYYY-MM-DD/hour=HH/part-00000.jsonl\n\n"
        "Each finished ds folder gets a _SUCCESS marker. Label days go on past the last impression\n"
        "day until the longest label window has closed. The same flags write the same bytes.",
    )
    return config_from_args(add_arguments(parser).parse_args(argv))


@dataclass(frozen=True)
class _Plan:
    """Facts of a run derived once from the config and the registry."""

    names: list[str]  # label types, registry order; the first is the click-like one
    windows_ms: np.ndarray
    label_days: list[dt.date]  # through the day the longest window of the last impression closes
    id_width: int  # digits of the impression number in an id

    @staticmethod
    def of(config: GenerateConfig, registry: DatasetRegistry) -> _Plan:
        midnight = dt.datetime.combine(config.dates[-1] + dt.timedelta(days=1), dt.time())
        last = (midnight + registry.max_window - dt.timedelta(microseconds=1)).date()
        names = [label.name for label in registry.labels]
        return _Plan(
            names=names,
            windows_ms=np.array([label.window // dt.timedelta(milliseconds=1) for label in registry.labels]),
            label_days=[config.start + dt.timedelta(days=k) for k in range((last - config.start).days + 1)],
            id_width=max(8, len(str(2 * config.impressions_per_day * (1 + len(names))))),
        )

    @property
    def end_ms(self) -> int:
        """The end (exclusive) of the last label partition."""
        return _ms(self.label_days[-1]) + gj.MS_PER_DAY


def _ms(day: dt.date) -> int:
    return (day - _EPOCH).days * gj.MS_PER_DAY


def _hours(time_ms: np.ndarray) -> np.ndarray:
    return (time_ms % gj.MS_PER_DAY) // 3_600_000


def _yyyymmdd(day: dt.date) -> int:
    return day.year * 10_000 + day.month * 100 + day.day


def _write_impressions(writer: gj.PartWriter, imp: gw.Impressions, columns: list[gj.Column], dup: np.ndarray,
                       width: int) -> None:  # fmt: skip
    for lo in range(0, imp.n, CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, imp.n)
        ids = gj.impression_ids(np.full(hi - lo, _yyyymmdd(imp.day)), np.arange(lo, hi), width)
        cols = [c.rows(lo, hi) for c in columns]
        matrix = gj.impression_lines(ids, imp.user[lo:hi], imp.item[lo:hi], imp.time_ms[lo:hi], cols)
        copies = np.repeat(np.arange(hi - lo), 1 + dup[lo:hi])  # a duplicate follows its original
        writer.write_rows(matrix[copies], _hours(imp.time_ms[lo:hi])[copies])


def _orphans(labels: gw.Labels, config: GenerateConfig, end_ms: int, rng: np.random.Generator) -> gw.Labels:
    """Labels whose impression was never logged: numbered past the day's last impression."""
    n = round(config.orphan_rate * labels.label.size)
    day = np.sort(rng.integers(0, config.days, n))
    rank = np.arange(n) - np.searchsorted(day, day)  # position among the orphans of the same day
    dates = np.array([_yyyymmdd(d) for d in config.dates], np.int64)
    times = _ms(config.start) + day * gj.MS_PER_DAY + rng.integers(0, gj.MS_PER_DAY, n)
    times = np.minimum(times + rng.exponential(60_000, n).astype(np.int64), end_ms - 1)
    types = rng.choice(labels.label, n) if labels.label.size else np.zeros(n, np.int64)
    return gw.Labels(dates[day], config.impressions_per_day + rank, types, np.full(n, -1), times)


def _arrange_labels(real: gw.Labels, config: GenerateConfig, end_ms: int) -> tuple[gw.Labels, np.ndarray, int]:
    """Add orphans, drop labels after the last label partition, sort by time, duplicate some.

    Returns the label lines in write order, a mask of the duplicate copies, and how many
    labels fell after the last partition (not written)."""
    rng = np.random.default_rng([config.seed, 6, config.start.toordinal(), config.days])
    every = gw.Labels.concat([real, _orphans(real, config, end_ms, rng)])
    keep = np.flatnonzero(every.time_ms < end_ms)
    order = keep[np.lexsort((every.label[keep], every.counter[keep], every.yyyymmdd[keep], every.time_ms[keep]))]
    copies = 1 + (rng.random(order.size) < config.duplicate_rate)
    rows = np.repeat(order, copies)  # a duplicate follows its original
    copy = np.zeros(rows.size, dtype=bool)
    copy[(np.cumsum(copies) - 1)[copies == 2]] = True
    fields = ("yyyymmdd", "counter", "label", "impression_ms", "time_ms")
    return gw.Labels(*(getattr(every, f)[rows] for f in fields)), copy, int(every.time_ms.size - keep.size)


def _write_labels(landing: Path, plan: _Plan, lab: gw.Labels, copy: np.ndarray) -> list[LabelDay]:
    """Write every label partition (empty ones too) and count what each holds."""
    orphan = lab.impression_ms < 0
    late = ~orphan & (lab.time_ms - lab.impression_ms > plan.windows_ms[lab.label])
    bounds = np.searchsorted(lab.time_ms // gj.MS_PER_DAY, [_ms(d) // gj.MS_PER_DAY for d in plan.label_days] + [
        plan.end_ms // gj.MS_PER_DAY])  # fmt: skip
    days = []
    for day, lo, hi in zip(plan.label_days, bounds[:-1], bounds[1:], strict=True):
        with gj.staged_partition(landing / "labels", day) as writer:
            for a in range(lo, hi, CHUNK_ROWS):
                b = min(a + CHUNK_ROWS, hi)
                ids = gj.impression_ids(lab.yyyymmdd[a:b], lab.counter[a:b], plan.id_width)
                lines = gj.label_lines(ids, lab.label[a:b], plan.names, lab.time_ms[a:b])
                writer.write_rows(lines, _hours(lab.time_ms[a:b]))
        counts = np.bincount(lab.label[lo:hi], minlength=len(plan.names)).tolist()
        days.append(LabelDay(format_ds(day), int(hi - lo), tuple(zip(plan.names, counts, strict=True)),
                             int(copy[lo:hi].sum()), int(orphan[lo:hi].sum()), int(late[lo:hi].sum()),
                             writer.files, writer.bytes))  # fmt: skip
    return days


def run(config: GenerateConfig, *, progress: Progress | None = None) -> GenerateSummary:
    """Generate the configured days into ``config.home/landing`` and return what was written."""
    say = progress or silent
    began = time.perf_counter()
    registry = load_dataset(config.dataset, config.registry_dir)
    plan = _Plan.of(config, registry)
    world = gw.build_world(users=config.users, items=config.items, seed=config.seed)
    impression_days, drawn = [], []
    for i, day in enumerate(config.dates, start=1):
        t0 = time.perf_counter()
        imp = gw.draw_impressions(world, day, config.impressions_per_day)
        dup = np.random.default_rng([config.seed, 5, day.toordinal()]).random(imp.n) < config.duplicate_rate
        with gj.staged_partition(config.landing / "impressions", day) as writer:
            features = gf.plan_features(registry, config.seed, day)
            _write_impressions(writer, imp, gf.feature_columns(world, imp, features), dup, plan.id_width)
        drawn.append(gw.draw_labels(world, imp, plan.windows_ms.tolist()))
        seconds, written = time.perf_counter() - t0, imp.n + int(dup.sum())
        impression_days.append(ImpressionDay(format_ds(day), written, imp.n, int(dup.sum()), 0, 0, writer.files,
                                             writer.bytes, seconds))  # fmt: skip
        clicks, conversions = int((drawn[-1].label == 0).sum()), int((drawn[-1].label > 0).sum())
        say(f"day {i}/{config.days} {format_ds(day)}: {written:,} impressions, {clicks:,} clicks, "
            f"{conversions:,} conversions, {writer.bytes / 1e6:.1f} MB, {seconds:.1f}s")  # fmt: skip
    t0 = time.perf_counter()
    lab, copy, past_horizon = _arrange_labels(gw.Labels.concat(drawn), config, plan.end_ms)
    label_days = _write_labels(config.landing, plan, lab, copy)
    say(f"labels: {len(label_days)} partitions {label_days[0].ds}..{label_days[-1].ds}, "
        f"{lab.label.size:,} lines, {time.perf_counter() - t0:.1f}s")  # fmt: skip
    first = ~copy & (lab.impression_ms >= 0)  # written, not a copy, not an orphan: one per impression and type
    for k, day in enumerate(impression_days):
        mine = first & (lab.yyyymmdd == _yyyymmdd(config.dates[k]))
        clicks, conversions = int((mine & (lab.label == 0)).sum()), int((mine & (lab.label > 0)).sum())
        impression_days[k] = replace(day, clicks=clicks, conversions=conversions)
    elapsed = time.perf_counter() - began
    return GenerateSummary(config.landing, registry.dataset, tuple(impression_days), tuple(label_days),
                           past_horizon, elapsed)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: progress to stderr, the summary to stdout; 2 on a featurehouse error."""
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    return run_command(lambda: run(parse_args(argv), progress=progress).format())


if __name__ == "__main__":
    raise SystemExit(main())
