"""Vectorised JSON-lines rendering and partition writing for the log generator (``etl/generate/job.py``).

Python's ``json.dumps`` and ``repr(float)`` cost about half a microsecond per value, and
an impression carries ~300 values, so the generator renders text with numpy instead::

      row 0  |{"user_id":|\\0\\0 4 2|,"dense":{|\\0"a":0.5\\0\\0|,"b":1 2.0|}}\\n|
      row 1  |{"user_id":| 1 9 0 7|,"dense":{|\\0\\0\\0\\0\\0\\0\\0\\0\\0|"b":3.25\\0|}}\\n|
              `- constant  `- digits   `- constant  `- key omitted    `- comma only
                 text         (NUL-       text         in row 1          when a key
                              padded)                                     came before

Every piece of a line is a *block*: a ``uint8`` array of shape ``(rows, width)`` holding
ASCII, padded with NUL bytes wherever a row's text is shorter than the block (leading
zeros, stripped trailing zeros, omitted keys, short lists). The blocks are laid side by
side, and one ``bytes.replace(b"\\0", b"")`` over a whole chunk of rows removes every
pad at once, which leaves valid, compact JSON lines. No Python code runs per value.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schemas.names import format_ds
from schemas.registry import Kind

NUL = 0
#: Significant digits kept when a float is written (values are rounded to them).
SIGNIFICANT_DIGITS = 6
#: Floats below 10**-MAX_DECIMALS in magnitude are written as 0.0.
MAX_DECIMALS = 12
#: Floats are clipped to +-FLOAT_LIMIT so that their digits fit an int64 exactly.
FLOAT_LIMIT = 1e14
#: An hour with more lines than this goes on in part-00001.jsonl, part-00002.jsonl, ...
MAX_LINES_PER_PART = 250_000
MS_PER_DAY = 86_400_000
EPOCH_ORDINAL = 719_163  # datetime.date(1970, 1, 1).toordinal()


@dataclass(frozen=True, eq=False)
class Column:
    """One feature's values for a batch of records, ready to render.

    Dense: ``values`` is float64 of shape (rows,). Sparse: ``values`` holds the ids of
    all rows back to back and row ``r`` owns ``values[offsets[r]:offsets[r + 1]]``.
    Weighted sparse: as sparse, plus ``weights`` aligned with ``values``. A row where
    ``omit`` is set leaves the key out; where ``null`` is set it writes ``null``.
    """

    name: str
    kind: Kind
    values: np.ndarray
    omit: np.ndarray
    null: np.ndarray
    offsets: np.ndarray | None = None
    weights: np.ndarray | None = None

    def rows(self, start: int, stop: int) -> Column:
        """The same column restricted to rows ``start:stop`` (offsets rebased to 0)."""
        omit, null = self.omit[start:stop], self.null[start:stop]
        if self.offsets is None:
            return Column(self.name, self.kind, self.values[start:stop], omit, null)
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        weights = None if self.weights is None else self.weights[lo:hi]
        offsets = self.offsets[start : stop + 1] - lo
        return Column(self.name, self.kind, self.values[lo:hi], omit, null, offsets, weights)


def text(value: str, rows: int) -> np.ndarray:
    """A block repeating ``value`` on every row (a read-only broadcast view)."""
    raw = np.frombuffer(value.encode("ascii"), dtype=np.uint8)
    return np.broadcast_to(raw, (rows, raw.size))


_POW10 = 10 ** np.arange(19, dtype=np.int64)


def digits(values: np.ndarray, width: int | None = None, *, zero_pad: bool = False) -> np.ndarray:
    """Decimal digits of non-negative integers, right-aligned; leading zeros become NUL unless ``zero_pad``."""
    v = np.asarray(values, dtype=np.int64)
    if width is None:
        width = len(str(int(v.max()))) if v.size else 1
    q = v.astype(np.int32 if width <= 9 else np.int64)  # int32 division is faster
    quotient, rest = np.empty_like(q), np.empty_like(q)
    out = np.empty((width, v.size), dtype=np.uint8)  # digit-major: each pass writes one contiguous row
    for j in range(width - 1, -1, -1):
        np.floor_divide(q, 10, out=quotient)
        np.multiply(quotient, 10, out=rest)
        np.subtract(q, rest, out=rest)
        out[j] = rest
        q, quotient = quotient, q
    out += 48
    if not zero_pad and width > 1:
        out[:-1] *= v >= _POW10[width - 1 : 0 : -1, None]
    return out.T


def floats(values: np.ndarray, null: np.ndarray | None = None) -> np.ndarray:
    """Floats rounded to 6 significant digits, e.g. ``0.0312346``, ``12.0``, ``-3.5``; ``null`` rows write null.

    Non-finite values are written as null too. Trailing zeros are dropped but one
    decimal is always kept, so every value reads back as a float.
    """
    x = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(x)
    if null is not None:
        bad |= null
    x = np.clip(np.where(bad, 0.0, x), -FLOAT_LIMIT, FLOAT_LIMIT)
    a = np.abs(x)
    exponent = np.log10(a, out=np.zeros_like(a), where=a > 0)
    decimals = np.clip(SIGNIFICANT_DIGITS - 1 - np.floor(exponent), 1, MAX_DECIMALS).astype(np.int64)
    scaled = np.rint(a * _POW10[decimals]).astype(np.int64)
    integer = scaled // _POW10[decimals]
    width = int(decimals.max()) if x.size else 1
    frac_block = digits((scaled - integer * _POW10[decimals]) * _POW10[width - decimals], width, zero_pad=True)
    if width > 1:  # drop trailing zeros, keeping the first decimal
        nonzero = frac_block[:, ::-1] != 48
        nonzero[:, -1] = True  # the first decimal always stays
        last = width - 1 - np.argmax(nonzero, axis=1)
        frac_block = frac_block * (np.arange(width)[None, :] <= last[:, None])
    sign = np.where((x < 0) & (scaled > 0), ord("-"), NUL).astype(np.uint8)[:, None]
    out = np.concatenate([sign, digits(integer), text(".", x.size), frac_block], axis=1)
    if bad.any():
        out[bad] = NUL
        out[bad, :4] = np.frombuffer(b"null", dtype=np.uint8)
    return out


def lists(elements: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """JSON arrays: row ``r`` holds element blocks ``offsets[r]:offsets[r+1]``, comma separated."""
    rows = offsets.size - 1
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if rows else 0
    if longest == 0:
        return text("[]", rows)
    width = elements.shape[1] + 1
    slots = np.zeros((rows, longest, width), dtype=np.uint8)
    row = np.repeat(np.arange(rows), lengths)
    slot = np.arange(elements.shape[0]) - offsets[row]
    slots[row, slot, 1:] = elements
    slots[row, slot, 0] = np.where(slot > 0, ord(","), NUL)
    return np.concatenate([text("[", rows), slots.reshape(rows, -1), text("]", rows)], axis=1)


def value_block(column: Column) -> np.ndarray:
    """The JSON value of one feature column (omitted rows still hold text; ``section`` masks them)."""
    rows = column.omit.size
    if column.kind is Kind.DENSE:
        return floats(column.values, column.null)
    assert column.offsets is not None
    if column.kind is Kind.SPARSE:
        elements = digits(column.values)
    else:
        assert column.weights is not None
        n = column.values.size
        elements = np.concatenate(
            [text('{"id":', n), digits(column.values), text(',"weight":', n), floats(column.weights), text("}", n)],
            axis=1,
        )
    block = lists(elements, column.offsets)
    if column.null.any():
        if block.shape[1] < 4:
            block = np.concatenate([block, np.zeros((rows, 4 - block.shape[1]), np.uint8)], axis=1)
        block = np.array(block)
        block[column.null] = NUL
        block[column.null, :4] = np.frombuffer(b"null", dtype=np.uint8)
    return block


def section(columns: Sequence[Column], rows: int) -> list[np.ndarray]:
    """Blocks of ``"key":value`` pairs joined by commas, leaving out each row's omitted keys."""
    blocks: list[np.ndarray] = []
    seen = np.zeros(rows, dtype=bool)
    for column in columns:
        present = ~column.omit
        comma = np.where(seen & present, ord(","), NUL).astype(np.uint8)[:, None]
        pair = np.concatenate([comma, text(f'"{column.name}":', rows), value_block(column)], axis=1)
        pair[column.omit] = NUL
        seen |= present
        blocks.append(pair)
    return blocks


def timestamps(ms: np.ndarray) -> np.ndarray:
    """UTC times in milliseconds since the epoch as ``2026-11-01T13:05:02.123Z``."""
    ms = np.asarray(ms, dtype=np.int64)
    days = ms // MS_PER_DAY
    unique, where = np.unique(days, return_inverse=True)  # only the few distinct dates go through Python
    dates = [dt.date.fromordinal(int(d) + EPOCH_ORDINAL).isoformat() + "T" for d in unique]
    table = np.frombuffer("".join(dates).encode("ascii"), dtype=np.uint8).reshape(len(dates), 11)
    of_day = ms - days * MS_PER_DAY
    n = ms.size
    return np.concatenate(
        [
            table[where.reshape(-1)],
            digits(of_day // 3_600_000, 2, zero_pad=True),
            text(":", n),
            digits(of_day // 60_000 % 60, 2, zero_pad=True),
            text(":", n),
            digits(of_day // 1000 % 60, 2, zero_pad=True),
            text(".", n),
            digits(of_day % 1000, 3, zero_pad=True),
            text("Z", n),
        ],
        axis=1,
    )


def impression_ids(yyyymmdd: np.ndarray, counter: np.ndarray, width: int) -> np.ndarray:
    """Impression ids ``i20261101-00000042``: the ds of the impression and its number that day."""
    n = counter.size
    return np.concatenate(
        [text("i", n), digits(yyyymmdd, 8, zero_pad=True), text("-", n), digits(counter, width, zero_pad=True)], axis=1
    )


def impression_lines(
    ids: np.ndarray, user: np.ndarray, item: np.ndarray, time_ms: np.ndarray, columns: Sequence[Column]
) -> np.ndarray:
    """The padded character matrix of impression lines (one row each, newline included)."""
    n = user.size
    by_kind = {kind: [c for c in columns if c.kind is kind] for kind in Kind}
    blocks = [
        text('{"impression_id":"', n),
        ids,
        text('","user_id":', n),
        digits(user),
        text(',"item_id":', n),
        digits(item),
        text(',"event_time":"', n),
        timestamps(time_ms),
        text('","dense":{', n),
        *section(by_kind[Kind.DENSE], n),
        text('},"sparse":{', n),
        *section(by_kind[Kind.SPARSE], n),
        text('},"weighted_sparse":{', n),
        *section(by_kind[Kind.WEIGHTED_SPARSE], n),
        text("}}\n", n),
    ]
    return np.concatenate(blocks, axis=1)


def label_lines(ids: np.ndarray, label_type: np.ndarray, names: Sequence[str], time_ms: np.ndarray) -> np.ndarray:
    """The padded character matrix of label lines; ``label_type`` indexes ``names``."""
    n = label_type.size
    longest = max(len(name) for name in names)
    table = np.zeros((len(names), longest), dtype=np.uint8)
    for i, name in enumerate(names):
        table[i, : len(name)] = np.frombuffer(name.encode("ascii"), dtype=np.uint8)
    blocks = [
        text('{"impression_id":"', n),
        ids,
        text('","label_type":"', n),
        table[label_type],
        text('","event_time":"', n),
        timestamps(time_ms),
        text('"}\n', n),
    ]
    return np.concatenate(blocks, axis=1)


def render(matrix: np.ndarray) -> bytes:
    """The text of a padded character matrix: its bytes with every NUL removed."""
    flat = np.ascontiguousarray(matrix).reshape(-1)
    return flat[flat != NUL].tobytes()


class PartWriter:
    """Appends time-ordered rows to ``hour=HH/part-NNNNN.jsonl`` files under one ds folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.files, self.bytes = folder, 0, 0
        self._hour, self._part, self._lines, self._file = -1, 0, 0, None

    def write_rows(self, matrix: np.ndarray, hours: np.ndarray) -> None:
        cuts = [0, *(np.flatnonzero(np.diff(hours)) + 1).tolist(), hours.size]
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            if lo < hi:
                self._write(int(hours[lo]), render(matrix[lo:hi]), hi - lo)

    def _write(self, hour: int, data: bytes, lines: int) -> None:
        if hour != self._hour or self._lines >= MAX_LINES_PER_PART:
            self._part = self._part + 1 if hour == self._hour else 0
            self.close()
            path = self.folder / f"hour={hour:02d}" / f"part-{self._part:05d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file, self._hour, self._lines = open(path, "wb"), hour, 0  # noqa: SIM115 (closed in close())
            self.files += 1
        self._file.write(data)
        self._lines += lines
        self.bytes += len(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@contextmanager
def staged_partition(table: Path, day: dt.date) -> Iterator[PartWriter]:
    """Write a ds folder in a hidden sibling, then move it into place with its _SUCCESS marker."""
    ds = format_ds(day)
    final, staging, old = table / f"ds={ds}", table / f".ds={ds}.tmp", table / f".ds={ds}.old"
    for path in (staging, old):
        shutil.rmtree(path, ignore_errors=True)
    staging.mkdir(parents=True)
    writer = PartWriter(staging)
    try:
        yield writer
        writer.close()
        (staging / "_SUCCESS").touch()
        if final.exists():  # rename cannot replace a non-empty folder: swap, then drop the old one
            final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        writer.close()
        shutil.rmtree(staging, ignore_errors=True)
        raise
