"""``featurehouse criteo-sample``: a synthetic file in Criteo's published format, with a planted signal.

    featurehouse criteo-sample data/criteo/train.txt --rows 70000            # Kaggle-like, one file
    featurehouse criteo-sample data/criteo/day_0.gz --rows 10000 --seed 1    # Terabyte-like, gzip

The real files cannot be downloaded here, so tests, benchmarks and the README's walk-through
import this instead. Every line has the published layout (``schemas/criteo.py``): a 0/1 label,
13 integer fields (heavy-tailed counts, a few negatives in I2, several fields missing on many
rows), 26 categoricals as 8 hex digits (cardinalities from 3 to 100,000; some often missing).

The planted signal: a click's log-odds are ``-1.5 + 0.9 * (log1p(I1) - 1) + effect[C1]``, with
one effect per C1 value drawn from N(0, 1.5) (C1 is never missing; I1 is missing on 20% of rows,
read as 0). A model that learns from I1 and C1 reaches an AUC near that of the true scores
(:func:`planted_scores`); the other fields are noise. Every ``--seed`` draws different lines from the
same vocabularies and effects, so files of several seeds are days of one dataset. ``--malformed K`` replaces K lines, spread through the file, with broken ones
(wrong field count, a non-integer, a non-hex categorical, a bad label, a blank line).
"""

from __future__ import annotations

import argparse
import gzip
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schemas.criteo import DENSE_FIELDS, SPARSE_FIELDS

#: Per integer field I1..I13: share of rows where it is missing.
MISSING_INT = (0.2, 0.0, 0.2, 0.2, 0.03, 0.2, 0.05, 0.0, 0.05, 0.45, 0.05, 0.75, 0.2)
#: Per categorical C1..C26: distinct values, and share of rows where it is missing.
CARDINALITY = (100, 500, 100_000, 50_000, 300, 24, 10_000, 600, 3, 20_000, 5_000, 80_000, 3_000, 27, 10_000,
               60_000, 10, 5_000, 2_000, 4, 70_000, 18, 15, 30_000, 100, 20_000)  # fmt: skip
MISSING_CAT = (0, 0, 0.03, 0.03, 0, 0, 0, 0, 0, 0, 0, 0.03, 0, 0, 0, 0.03, 0, 0, 0.44, 0.44, 0.03, 0.75, 0, 0.03,
               0.44, 0.44)  # fmt: skip
BASE_LOGIT, I1_WEIGHT, C1_SPREAD = -1.5, 0.9, 1.5
#: The vocabularies (each field's hash values) and the C1 effects, the same for every --seed: files written
#: with different seeds are days of one dataset, as the 1TB logs' day_N files are.
WORLD = 0
MALFORMED_KINDS = ("field_count", "not_integer", "not_hex", "bad_label", "empty_line")


@dataclass(frozen=True)
class Sample:
    """What was written: the file, its lines, clicks, and which line numbers (1-based) are malformed."""

    path: Path
    rows: int
    clicks: int
    malformed: tuple[int, ...]


def _effects() -> np.ndarray:
    return np.random.default_rng([WORLD, 1]).normal(0.0, C1_SPREAD, CARDINALITY[0])


def _hashes(rng: np.random.Generator, cardinality: int) -> np.ndarray:
    """A field's values as distinct 32-bit hashes (what Criteo publishes), lowercase 8-hex strings."""
    ids = rng.choice(2**32, size=cardinality, replace=False)
    return np.array([f"{v:08x}" for v in ids])


@dataclass(frozen=True)
class _Drawn:
    labels: np.ndarray  # int64[rows]
    int_text: list[np.ndarray]  # per integer field, str[rows] ("" = missing)
    cat_text: list[np.ndarray]  # per categorical, str[rows]
    score: np.ndarray  # the true log-odds, minus the constant


def _draw(rows: int, seed: int) -> _Drawn:
    rng = np.random.default_rng(seed)
    values_rng = np.random.default_rng([WORLD, 2])  # every seed draws from one vocabulary
    ints = []
    for k in range(DENSE_FIELDS):
        counts = rng.geometric(p=1.0 / (2.0 + 3 * k), size=rows) - 1
        if k == 1:  # I2 holds negatives in the published data
            counts = counts - rng.integers(0, 4, size=rows) * (rng.random(rows) < 0.1)
        ints.append(counts)
    missing = [rng.random(rows) < share for share in MISSING_INT]
    # a Zipf-like draw per categorical: a few values are common, most are rare
    cats = [np.minimum((rng.pareto(1.2, size=rows) * 3).astype(np.int64), n - 1) for n in CARDINALITY]
    i1 = np.where(missing[0], 0, ints[0])  # as a DLRM reads it: missing is 0
    score = I1_WEIGHT * (np.log1p(i1) - 1.0) + _effects()[cats[0]]
    labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-(BASE_LOGIT + score)))).astype(np.int64)
    int_text = [np.where(missing[k], "", ints[k].astype(str)) for k in range(DENSE_FIELDS)]
    cat_text = [np.where(rng.random(rows) < MISSING_CAT[k], "", _hashes(values_rng, CARDINALITY[k])[cats[k]])
                for k in range(SPARSE_FIELDS)]  # fmt: skip
    return _Drawn(labels, int_text, cat_text, score)


def _broken(kind: str, line: str) -> str:
    fields = line.split("\t")
    if kind == "field_count":
        return "\t".join(fields[:-3])
    if kind == "not_integer":
        fields[3] = "2.5"
    elif kind == "not_hex":
        fields[20] = "zz12ab9q"
    elif kind == "bad_label":
        fields[0] = "yes"
    else:
        return ""
    return "\t".join(fields)


def lines(rows: int, seed: int = 0, malformed: int = 0) -> Iterator[tuple[int, str, bool]]:
    """(label, line without newline, malformed?) for ``rows`` lines; the malformed ones are evenly spread."""
    drawn = _draw(rows, seed)
    bad_at = {int(i): kind for i, kind in zip(np.linspace(0, rows - 1, malformed, dtype=np.int64) if malformed else [],
                                                  (MALFORMED_KINDS * malformed)[:malformed], strict=True)}  # fmt: skip
    for i in range(rows):
        label = int(drawn.labels[i])
        line = "\t".join([str(label), *(c[i] for c in drawn.int_text), *(c[i] for c in drawn.cat_text)])
        yield (label, _broken(bad_at[i], line), True) if i in bad_at else (label, line, False)


def write_sample(path: str | Path, rows: int, *, seed: int = 0, malformed: int = 0) -> Sample:
    """Write ``rows`` lines to ``path`` (gzip if it ends in .gz); return what was written."""
    if rows <= 0:
        raise ValueError(f"--rows {rows}: give a positive number of lines")
    if not 0 <= malformed <= rows:
        raise ValueError(f"--malformed {malformed}: give between 0 and --rows ({rows}) lines")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    clicks, bad = 0, []
    tmp = path.with_name(path.name + ".tmp")
    with opener(tmp, "wt", encoding="ascii", newline="\n") as out:
        for number, (label, line, broken) in enumerate(lines(rows, seed, malformed), start=1):
            out.write(line + "\n")
            if broken:
                bad.append(number)
            else:
                clicks += label
    tmp.replace(path)
    return Sample(path, rows, clicks, tuple(bad))


def planted_scores(rows: int = 200_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(labels, true log-odds less a constant) of ``rows`` lines: their AUC is about the best any model can do."""
    drawn = _draw(rows, seed)
    return drawn.labels, drawn.score


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="featurehouse criteo-sample",
        description="Write a synthetic file in Criteo's published click-log format (label, 13 integers, 26 "
        "8-hex-digit categoricals, tab-separated) with a planted signal in I1 and C1; gzip if OUT ends in .gz.",
    )
    parser.add_argument("out", type=Path, help="the file to write, e.g. data/criteo/train.txt or day_0.gz")
    parser.add_argument("--rows", type=int, default=70_000, help="lines to write (default 70,000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the lines (default 0); every seed shares one "
                        "vocabulary and planted signal, so files of different seeds are days of one dataset")
    parser.add_argument("--malformed", type=int, default=0, metavar="K", help="replace K lines with broken ones")
    ns = parser.parse_args(argv)
    try:
        sample = write_sample(ns.out, ns.rows, seed=ns.seed, malformed=ns.malformed)
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {sample.path}: {sample.rows:,} lines, {sample.clicks:,} clicks"
          f" ({sample.clicks / max(1, sample.rows - len(sample.malformed)):.1%}), {len(sample.malformed)} malformed"
          + (f" at lines {', '.join(map(str, sample.malformed[:10]))}{' ...' if len(sample.malformed) > 10 else ''}"
             if sample.malformed else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
