"""What every command of the command line shares: the ``--json``, ``--no-progress`` and storage
options, the process-state options, ``NAME=VALUE`` pairs, former flag names, and running a
command: its result printed as text or JSON, a failure turned into exit status 1 (see
:mod:`spark_state.cli`).

The flags carry the Python API's argument names: ``--storage-option KEY=VALUE`` is
``storage_options`` (every location the command reads or writes), ``--target-storage-option``
is ``target_storage_options`` (the location a savepoint, restore or migrate writes, when it
needs other options). A former name stays as a hidden alias that warns on stderr
(:func:`deprecated_alias`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from typing import Any, Callable, Iterator, Optional, TextIO

from ..errors import SparkStateError

#: What an operation that failed raises (anything else is a bug and keeps its traceback).
FAILURES = (SparkStateError, ValueError, OSError)

#: --process-root of the commands that read process state
ROOT_HELP = ("root of keyed_process/checkpointed_process state kept under a state_root, as DIR/<query id>/<name> "
             "(state beside the checkpoint, <checkpoint>/spark-state/<name>, is found without it; default: also the "
             "former default root ./spark-state, if it exists)")


def command(sub, name: str, text: str, run: Callable[[argparse.Namespace], Any]) -> argparse.ArgumentParser:
    """A subcommand with the shared options; ``run(args)`` returns ``(result, summary)`` (exit
    status 0), ``(result, summary, status)`` for a command whose result is a verdict, or a
    :class:`Streamed` result that prints itself."""
    p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="storage option (s3.*, retry.*, hdfs.*; e.g. s3.endpoint_url=...) of every location the "
                        "command reads or writes (a location ignores other schemes' options), repeatable")
    deprecated_alias(p, "--option", "--storage-option", append=True)
    p.set_defaults(run=lambda args: _run(args, run))
    return p


def target_storage_option(p: argparse.ArgumentParser, written: str) -> None:
    """``--target-storage-option`` of a command that writes a second location, ``written``."""
    p.add_argument("--target-storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help=f"storage option of {written}, when it needs other options than --storage-option's (given "
                        "once, these replace them all for it), repeatable")


def deprecated_alias(p: argparse.ArgumentParser, old: str, new: str, *, append: bool = False, **kwargs: Any) -> None:
    """``old``, a former name of the flag ``new``: hidden from ``--help``, it stores into ``new``'s
    destination and says once on stderr that it is deprecated."""
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(old, action=_DeprecatedAlias, dest=dest, new=new, append=append, help=argparse.SUPPRESS, **kwargs)


class _DeprecatedAlias(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, *, new: str, append: bool, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.append, self.warned = new, append, False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        if not self.warned:
            self.warned = True
            print(f"warning: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        if self.nargs == 0:  # a switch: it stores its constant
            values = self.const
        if self.append:  # a new list: the default one is shared (as argparse's own append does)
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)


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
    """The ``--storage-option``s given (``storage_options`` of the API)."""
    return pairs(args.storage_option, "--storage-option")


def target_storage_options(args: argparse.Namespace) -> Optional[dict[str, str]]:
    """The ``--target-storage-option``s given (``target_storage_options`` of the API); ``None``
    without any (the location written then takes ``--storage-option``'s)."""
    return pairs(args.target_storage_option, "--target-storage-option") or None


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


class Streamed:
    """A command's result printed while it is produced, never held whole (a table of any size,
    :mod:`.table`): ``write(out, as_json)`` prints it on ``out``, as JSON or as text. A failure
    while it prints is reported as any other (exit status 1), after the part already printed."""

    def __init__(self, write: Callable[[TextIO, bool], None]) -> None:
        self.write = write


@contextlib.contextmanager
def local_spark(master: str, app_name: str) -> Iterator[Any]:
    """The active SparkSession when called from Python with one running, else a local one with
    spark-state's confs, no UI and quiet logs, stopped on exit."""
    from pyspark.sql import SparkSession

    from ..spark.session import configure

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _run(args: argparse.Namespace, fn: Callable[[argparse.Namespace], Any]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        outcome = fn(args)
        if isinstance(outcome, Streamed):
            outcome.write(sys.stdout, args.json)
            return 0
    except FAILURES as exc:
        return failed(exc, args.json)
    result, summary, *status = outcome  # a third item: the exit status of a result that is a verdict
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(summary)
    return status[0] if status else 0
