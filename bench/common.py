"""What every benchmark of the suite shares: timed rounds, medians with their spread, pairwise ratios,
peak memory and progress lines.

A figure is the median of ``runs`` timed runs after one warm-up run, printed with min and max. The
contenders of one comparison run in rounds whose order rotates, so a busy moment of the machine hits
every contender alike, and a ratio is taken pair by pair within each round before its median.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa

from ingest.projected_reads import CountingFile, IoCounter

_STARTED = time.perf_counter()


def say(message: str) -> None:
    """One progress line on stderr, with the minutes and seconds since the process started."""
    elapsed = time.perf_counter() - _STARTED
    print(f"[{int(elapsed // 60):02d}:{elapsed % 60:04.1f}] {message}", file=sys.stderr, flush=True)


def summary(values: list[float]) -> dict:
    """``{"median", "min", "max", "runs"}`` of some runs' values."""
    if not values:
        raise ValueError("no runs to summarise")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": list(values)}


def rounds(contenders: Mapping[str, Callable[[], dict]], runs: int, *, label: str = "",
           warmup: bool = True) -> dict[str, list[dict]]:  # fmt: skip
    """Each contender's ``runs`` results after one warm-up round, in rounds whose order rotates.

    A contender returns a dict of measures; ``seconds`` (its wall time) is added unless it gives its own.
    ``warmup=False`` only where the same contenders have just had their warm-up (a later size of one sweep).
    """
    if runs < 3:
        raise ValueError(f"runs={runs}: every figure is the median of at least 3 runs after a warm-up")
    names = list(contenders)
    results: dict[str, list[dict]] = {name: [] for name in names}
    first = 0 if warmup else 1
    for round_ in range(first, runs + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            began = time.perf_counter()
            result = dict(contenders[name]())
            result.setdefault("seconds", time.perf_counter() - began)
            say(f"{label}{name}: {'warm-up' if round_ == 0 else f'run {round_}/{runs}'} {result['seconds']:.2f}s")
            if round_:
                results[name].append(result)
    return results


def figure(results: list[dict], key: str = "seconds") -> dict:
    """The summary of one measure over a contender's runs."""
    return summary([r[key] for r in results])


def ratio(top: list[dict], bottom: list[dict], key: str = "seconds") -> dict:
    """``top / bottom`` of one measure, round by round (both lists from the same :func:`rounds`), summarised."""
    if len(top) != len(bottom):
        raise ValueError("a ratio pairs runs of the same rounds: the two lists differ in length")
    return summary([a[key] / b[key] for a, b in zip(top, bottom, strict=True)])


def spread(fig: dict, unit: str = "s", digits: int = 2) -> str:
    """``median [min..max]`` of a summary, for printing."""
    return f"{fig['median']:.{digits}f}{unit} [{fig['min']:.{digits}f}..{fig['max']:.{digits}f}]"


class CountedFile(CountingFile):
    """The counting file of ingest.projected_reads over a local path, that also counts read requests and sleeps ``latency``
    seconds before each (object storage's first-byte latency, stood in for)."""

    def __init__(self, path: str, latency: float) -> None:
        super().__init__(pa.OSFile(path, "rb"), IoCounter())
        self.latency, self.requests = latency, 0

    @property
    def bytes(self) -> int:
        return self._counter.bytes_read

    def read(self, nbytes: int | None = None) -> bytes:
        return self.read_buffer(nbytes).to_pybytes()

    def read_buffer(self, nbytes: int | None = None) -> pa.Buffer:
        if self.latency:
            time.sleep(self.latency)
        self.requests += 1
        return super().read_buffer(nbytes)


def reset_peak(pid: int) -> None:
    """Reset the peak resident set size (VmHWM) of ``pid`` to its current size (Linux clear_refs 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def rss_mib(pid: int) -> float:
    """The current resident set size (VmRSS) of ``pid``, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mib(pid: int) -> float:
    """The peak resident set size (VmHWM) of ``pid`` since it started or was last reset, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
