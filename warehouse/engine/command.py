"""``featurehouse engine start|stop|status|logs``: the home's resident Spark Connect server.

    featurehouse engine start [--idle-stop-minutes 30] [--conf spark.driver.memory=8g]
    featurehouse engine status
    featurehouse engine logs [-n 50]
    featurehouse engine stop

A command that needs the engine starts it itself; ``start`` is for choosing its settings (static
Spark settings such as the driver's memory are fixed for the engine's life) or starting it ahead of
work. The engine listens on 127.0.0.1 behind a token in ``<home>/engine/token`` (mode 0600) and
stops itself after the idle time (default 30 minutes, or ``$FEATUREHOUSE_ENGINE_IDLE_MINUTES``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from schemas.exit import run_command
from schemas.paths import default_home
from warehouse.confs import parse_conf_pairs
from warehouse.engine.client import engine_lock, log_tail, running_engine, start_engine, stop_engine
from warehouse.engine.server import DEFAULT_IDLE_STOP_MINUTES, IDLE_VARIABLE
from warehouse.engine.state import EngineFiles, code_version, read_json


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="featurehouse engine",
                                     description="Start, stop and inspect the data folder's resident Spark engine "
                                     "(a Spark Connect server) that featurehouse sql and label-join run on.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))  # fmt: skip
    parser.add_argument("action", choices=["start", "stop", "status", "logs"])
    parser.add_argument("--home", type=Path, default=None,
                        help="the data folder whose engine this is (default: $FEATUREHOUSE_HOME, else data/)")
    parser.add_argument("--idle-stop-minutes", type=float, default=None, metavar="M",
                        help=f"start: stop after M idle minutes (default ${IDLE_VARIABLE}, else "
                             f"{DEFAULT_IDLE_STOP_MINUTES:g})")  # fmt: skip
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="start: a Spark setting of the engine, repeatable (e.g. spark.driver.memory=8g)")
    parser.add_argument("-n", "--lines", type=int, default=50, help="logs: how many of the last lines (default 50)")
    return parser.parse_args(argv)


def status_text(files: EngineFiles) -> str:
    state = running_engine(files)
    if state is None:
        return f"no engine runs for {files.home}"
    beat = read_json(files.heartbeat) or {}
    since = dt.datetime.fromisoformat(state.started_at)
    up = dt.datetime.now(dt.UTC) - since
    idle = time.time() - beat.get("idle_since", time.time())
    version = state.version + ("" if state.version == code_version() else f" (this checkout: {code_version()})")
    rows = [
        ("home", files.home), ("pid", state.pid), ("listening", f"127.0.0.1:{state.port} (token in {files.token})"),
        ("since", f"{state.started_at} (up {str(up).split('.')[0]})"), ("version", version),
        ("pyspark", state.pyspark), ("python", state.python), ("driver memory", state.driver_memory),
        ("settings", ", ".join(f"{k}={v}" for k, v in state.settings.items()) or "the embedded default"),
        ("scheduling", state.scheduling),
        ("now", f"{beat.get('sessions', 0)} client session(s), {beat.get('operations', 0)} operation(s), "
                f"{beat.get('jobs', 0)} Spark job(s); idle {idle:.0f} s "
                f"of {state.idle_stop_s:.0f} s before it stops itself"),
        ("log", files.log),
    ]  # fmt: skip
    return tabulate(rows, tablefmt="plain")


def run(args: argparse.Namespace) -> str:
    files = EngineFiles((args.home or default_home()).resolve())
    if args.action == "status":
        return status_text(files)
    if args.action == "logs":
        return log_tail(files, args.lines)
    parse_conf_pairs(args.conf)  # a malformed pair is refused before anything starts
    with engine_lock(files):
        state = running_engine(files)
        if args.action == "stop":
            if state is None:
                return f"no engine runs for {files.home}"
            stop_engine(files, state)
            return f"stopped the engine for {files.home} (pid {state.pid})"
        if state is not None:
            return f"the engine for {files.home} already runs (pid {state.pid}); `featurehouse engine stop` first " \
                   "to start it with other settings\n" + status_text(files)
        started = time.monotonic()
        start_engine(files, idle_stop_minutes=args.idle_stop_minutes, confs=args.conf)
        return f"started in {time.monotonic() - started:.1f} s\n" + status_text(files)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(lambda: run(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
