"""The command line: ``python -m spark_state <command>`` or the ``spark-state`` script.

Commands: ``inspect``, ``savepoint``, ``restore``, ``rescale``, ``migrate``, ``move-state`` (the operations
of :mod:`spark_state.ops`, the same functions as the Python API: :mod:`.operations`), ``get``, ``read``
and ``erase`` (a point lookup, rows of a state, erasure of keys: :mod:`spark_state.state_data`, in
:mod:`.state_data`), ``upgrade-check`` and ``carry-over`` (will a changed query restart on its
checkpoint, and carrying its state over: :mod:`spark_state.upgrade`, in :mod:`.upgrade`), ``demo``,
``jar`` and ``server-conf`` (the confs of a Spark Connect server or other driver started elsewhere:
:mod:`.runtime`). The arguments every command shares, the error to exit
status mapping and the printing of results are in :mod:`.arguments`.

Conventions (every command follows them; keep them when adding one):

* One entry point with subcommands (argparse); ``--help`` on each. These modules only parse
  arguments, call one function of the API and print its result: no logic of their own.
* Output: a short human summary on stdout; ``--json`` prints the result as one JSON
  document on stdout instead (for scripts). Progress bars and logs go to stderr, and bars
  only when stderr is a terminal (``--no-progress`` turns them off).
* Exit status: 0 on success only; 1 when the operation failed (``error: <message>`` on
  stderr; with ``--json`` also ``{"error": ..., "message": ...}`` on stdout, see
  :func:`.arguments.failed`); 2 for bad arguments (argparse's usage message).
* Flags are named like the Python API's arguments (``--batch`` is ``batch``, ``--operator-id``
  is ``operator_id``). Options with values: ``--partitions N``, ``--batch N``, ``--backend
  rocksdb|hashmap``, ``--to spark-state|hdfs|rocksdb``; process state: ``--process-root DIR`` and
  ``--process-location NAME=URL`` (repeatable); storage: ``--storage-option KEY=VALUE``
  (repeatable: ``storage_options``, of every location the command reads or writes, such as
  ``s3.endpoint_url``) and, on the commands that write a second location (savepoint, restore,
  migrate), ``--target-storage-option KEY=VALUE`` (``target_storage_options``: that location's,
  when it needs others). A former flag name stays as a hidden alias that warns on stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import operations, runtime, state_data, upgrade


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m spark_state") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:  # the demo parses its own options
        return runtime.demo(argv[1:])
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    return args.run(args)


def main_entry() -> None:
    """The ``spark-state`` console script."""
    sys.exit(main(prog="spark-state"))


def _parser(prog: str) -> argparse.ArgumentParser:
    """The parser of every command, in the order ``--help`` lists them."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="spark-state: operate stateful Spark Structured Streaming queries "
                    "(inspect, savepoint, restore, rescale, migrate, move-state), their state as data (get, read, "
                    "erase) and changes to them (upgrade-check, carry-over); the demo; the JVM shim jar and "
                    "the confs of a Spark driver (e.g. a Spark Connect server) started elsewhere.")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    operations.add_commands(sub)
    state_data.add_commands(sub)
    upgrade.add_commands(sub)
    runtime.add_commands(sub)
    return parser
