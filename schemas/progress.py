"""Progress lines: the one type of a progress callback, the stderr one every command passes, and one that says nothing.

A job's ``run`` takes ``progress: Progress``; ``main`` passes :func:`stderr_progress`, tests pass a list's ``append``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from schemas.redact import redact

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """Print one progress line to stderr, stamped with the wall clock; secrets in it are redacted."""
    print(f"[{time.strftime('%H:%M:%S')}] {redact(message)}", file=sys.stderr, flush=True)


def silent(_message: str) -> None:
    """A progress callback that drops every line."""
