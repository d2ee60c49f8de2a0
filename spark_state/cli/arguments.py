"""What every command of the command line shares: the ``--json``, ``--no-progress`` and storage
options, the process-state options, ``NAME=VALUE`` pairs, and running a command: its result
printed as text or JSON, a failure turned into exit status 1 (see :mod:`spark_state.cli`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Callable

from ..errors import SparkStateError

#: What an operation that failed raises (anything else is a bug and keeps its traceback).
FAILURES = (SparkStateError, ValueError, OSError)

#: --process-root of the commands that read process state
ROOT_HELP = ("root of keyed_process/checkpointed_process state kept under a state_root, as DIR/<query id>/<name> "
             "(state beside the checkpoint, <checkpoint>/spark-state/<name>, is found without it; default: also the "
             "former default root ./spark-state, if it exists)")


def command(sub, name: str, text: str, run: Callable[[argparse.Namespace], Any]) -> argparse.ArgumentParser:
    """A subcommand with the shared options; ``run(args)`` returns ``(result, summary)``."""
    p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="checkpoint storage option (e.g. s3.endpoint_url=...), repeatable")
    p.set_defaults(run=lambda args: _run(args, run))
    return p


def process_options(p: argparse.ArgumentParser, root_help: str = ROOT_HELP) -> None:
    """``--process-root`` and ``--process-location`` (see :func:`common`)."""
    p.add_argument("--process-root", metavar="DIR", help=root_help)
    p.add_argument("--process-location", action="append", default=[], metavar="NAME=URL",
                   help="state location of a process operator given an explicit state_location, repeatable")


def pairs(items: list[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` items as a dict; a malformed one exits with status 2, naming ``option``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(_usage_error(f"{option} takes NAME=VALUE, got {item!r}"))
        out[key] = value
    return out


def _usage_error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def storage_options(args: argparse.Namespace) -> dict[str, str]:
    """The storage options given (``storage_options`` of the API)."""
    return pairs(args.option, "--option")


def common(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of the process and storage options, as the API names them."""
    return {"process_root": args.process_root, "process_locations": pairs(args.process_location, "--process-location"),
            "storage_options": storage_options(args)}


def failed(exc: BaseException, as_json: bool) -> int:
    """Report a failed command: ``error: <message>`` on stderr and, with ``--json``, the error
    as JSON on stdout; returns the exit status (1)."""
    if as_json:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    print(f"error: {exc}", file=sys.stderr)
    return 1


def _run(args: argparse.Namespace, fn: Callable[[argparse.Namespace], Any]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        result, summary = fn(args)
    except FAILURES as exc:
        return failed(exc, args.json)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(summary)
    return 0
