"""tune_malloc: freed arrays of a few MB are reused instead of faulting in fresh pages (counted by the kernel)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# 40 times: three arrays of 8, 8 and 4 MiB written whole, then freed together (as a window's parts are);
# minor page faults counted by getrusage
PROBE = """
import resource, sys
import numpy as np
from ingest.memory import tune_malloc
tuned = tune_malloc() and tune_malloc()  # the second call is a no-op that still says True
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    a, b, c = np.ones(1 << 20), np.ones(1 << 20), np.ones(1 << 19)
    del c, b, a
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(**env: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, **env})  # fmt: skip
    tuned, count = done.stdout.split()
    return tuned, int(count)


def test_tuned_malloc_reuses_freed_arrays_instead_of_faulting_in_new_pages():
    tuned, with_tuning = faults()
    off, without = faults(FEATUREHOUSE_MALLOC_TUNING="0")
    assert (tuned, off) == ("True", "False")
    # untuned, glibc gives the freed top of its heap back each time and the next arrays fault in again (60,500
    # faults here); tuned, the first round's pages are reused (1,536)
    assert with_tuning * 10 < without, (with_tuning, without)
