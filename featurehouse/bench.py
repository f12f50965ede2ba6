"""``featurehouse bench [--quick]``: the benchmark suite (bench/suite.py), from a source checkout.

The benchmarks live in the repository's ``bench/`` package, beside this package: they need the
repository's job specs and write ``bench/results/<date>/``. Its sections run as
``python -m bench.suite`` from the repository's root.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "bench" / "suite.py"


def main(argv: Sequence[str] | None = None) -> int:
    if not SUITE.exists():
        print(f"featurehouse bench: {SUITE} is not here: the benchmarks run from a source checkout of featurehouse "
              "(git clone, then make bench)", file=sys.stderr)  # fmt: skip
        return 2
    suite = importlib.import_module("bench.suite")
    return int(suite.main(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    raise SystemExit(main())
