"""How a command ends, and the one line of an exception that a message quotes.

:func:`run_command` prints a command's output on stdout and returns 0, or turns a FeaturehouseError into one
``error:`` line on stderr and returns its ``exit_status`` (``EXIT_ERROR`` or ``EXIT_REFUSED``, defined in
:mod:`schemas.errors` beside the error classes that carry them). :func:`first_line` is the first line of any
exception's message, for the messages that quote one (Spark's run to pages).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

from schemas.errors import FeaturehouseError
from schemas.redact import redact

#: A command stopped by Ctrl-C or SIGTERM: the shell's own status for SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (Spark's run to pages), or its type when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def run_command(body: Callable[[], str | None], secrets: Iterable[str] = ()) -> int:
    """Run a command's body; print what it returns to stdout and exit 0.

    A :class:`FeaturehouseError` becomes ``error: <message>`` on stderr and its
    ``exit_status`` (2; 3 for refused data, whose summary is printed first), the one
    place every ``main(argv)`` turns errors into an exit status. The message
    is redacted first (:func:`schemas.redact.redact`): secret conf values, URL and JDBC
    passwords, and every value in ``secrets``, which is read only then, so ``body``
    may fill it (a list) once it knows them.
    """
    try:
        output = body()
    except KeyboardInterrupt:  # Ctrl-C (or, on the engine, SIGTERM): what ran was stopped, nothing half-published
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except FeaturehouseError as err:
        details = getattr(err, "details", "")
        if details:
            print(redact(details, secrets), flush=True)
        print(f"error: {redact(str(err), secrets)}", file=sys.stderr)
        return err.exit_status
    if output is not None:
        print(output)
    return 0
