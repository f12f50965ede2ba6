"""A test-only hook: the stream kills itself with SIGKILL at a named point, so that a test can restart it from there.

    FEATUREHOUSE_STREAM_KILL_AT=staged:1      after micro-batch 1 staged its records, before its commit file
    FEATUREHOUSE_STREAM_KILL_AT=between:1     as micro-batch 1 begins: 0's commit file written, 1 has written nothing
    FEATUREHOUSE_STREAM_KILL_AT=published     in stream-publish, after a day's partition commit, before its decision row

The whole process group is killed (the stream, its JVM, a stream-publish process and its JVM), as
``kill -9 -<pgid>`` would: start the stream in a session of its own. Unset, the hook does nothing.
"""

from __future__ import annotations

import os
import signal

KILL_AT_ENV = "FEATUREHOUSE_STREAM_KILL_AT"


def kill_point(name: str) -> None:
    """SIGKILL this process group if ``FEATUREHOUSE_STREAM_KILL_AT`` names ``name``."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.killpg(os.getpgrp(), signal.SIGKILL)
