"""The state-as-data commands: ``get``, ``read`` and ``erase``, each one call of
:mod:`spark_state.state_data` (see :mod:`spark_state.cli` for the conventions)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator, TextIO

from . import table
from .arguments import Streamed, command, common, deprecated_alias, local_spark, process_options

if TYPE_CHECKING:
    from ..state_data.read_options import ReadOptions


def add_commands(sub) -> None:
    """Add the state-as-data commands to the subparsers ``sub``."""
    p = command(sub, "get", "print one key's value in one keyed state of a query, from its last committed batch "
                            "or a savepoint (reads only the partition store that holds the key; safe on a running "
                            "query)", _get)
    p.add_argument("path", help="the query's checkpointLocation, or a savepoint directory")
    p.add_argument("state", help="the keyed state's name (its descriptor's name)")
    p.add_argument("key", help="the key: its value as text for one key column (42, alice, 2024-01-31, 0x00ff for "
                               "binary), or a JSON array of the key columns' values ('[\"eu\", 42]')")
    p.add_argument("--function", metavar="NAME", help="the keyed function's name (needed when the query has several)")
    p.add_argument("--batch", type=int, help="the committed batch to read (default: the latest; a savepoint's: its "
                                             "batch)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="decode pickled values (unpickling runs whatever the stored bytes say: trusted storage only)")
    process_options(p)

    p = command(sub, "read", "print a state of a checkpoint or savepoint as rows, as they are read (any size): a "
                             "keyed state, a keyed function's timers (--timers), a keyed state's change feed "
                             "(--start-batch), a function's operator state (--operator-state), or a Spark "
                             "operator's state (--operator-id, through a local Spark session)", _read)
    p.add_argument("path", help="the query's checkpointLocation, or a savepoint directory")
    p.add_argument("state", nargs="?", help="the keyed state's name (not with --timers or --operator-id)")
    p.add_argument("--function", metavar="NAME", help="the keyed function's name (needed when the query has several)")
    p.add_argument("--batch", type=int, help="the committed batch to read (default: the latest)")
    p.add_argument("--flatten-collection-types", action="store_true",
                   help="list and map state: one row per element or entry (default: one row per key)")
    p.add_argument("--timers", action="store_true", help="the keyed function's registered timers")
    p.add_argument("--start-batch", type=int, metavar="BATCH",
                   help="the change feed: the changes batches BATCH..--end-batch made to the state")
    p.add_argument("--end-batch", type=int, metavar="BATCH",
                   help="with --start-batch: the last batch of the change feed (default: the last committed)")
    p.add_argument("--operator-state", action="store_true",
                   help="the state named is a function's operator state (list, union list or broadcast), per partition")
    p.add_argument("--operator-id", type=int, metavar="ID", help="a Spark operator's state, as Spark's reader shows it")
    deprecated_alias(p, "--operator", "--operator-id", type=int)
    p.add_argument("--store-name", metavar="NAME", help="with --operator-id: the store (joins have four)")
    deprecated_alias(p, "--store", "--store-name")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="rows to print (0: all; default 20)")
    p.add_argument("--master", default="local[2]",
                   help="with --operator-id: the Spark master of the session (default local[2])")
    p.add_argument("--allow-pickle", action="store_true",
                   help="decode pickled values (unpickling runs whatever the stored bytes say: trusted storage only)")
    process_options(p)

    p = command(sub, "erase", "delete keys from every state of a stopped query's keyed functions (values, lists, "
                              "maps, timers, TTL index), as of its last committed batch", _erase)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("keys", nargs="*", metavar="KEY", help="a key, typed as for `get` (repeatable)")
    p.add_argument("--keys-file", metavar="FILE", help="more keys, one per line (as typed for `get`)")
    p.add_argument("--function", metavar="NAME", help="only this keyed function (default: every keyed function)")
    p.add_argument("--operator-key", action="append", default=[], metavar="COL",
                   help="also erase the rows of Spark's stateful operators whose key has this column (repeatable, "
                        "one per key column) equal to a key; KEY values then are those columns' values")
    p.add_argument("--force", action="store_true",
                   help="skip the running-query check (only when you know the query is stopped)")
    process_options(p)


def _get(args):
    from ..state_data import StateLookup

    with StateLookup(args.path, function=args.function, allow_pickle=args.allow_pickle,
                     **common(args)) as states:
        r = states.lookup(args.state, states.key_columns.parse(args.key), batch=args.batch)
    d = r.to_dict()
    shown = json.dumps(d["value"]) if r.found else "(no value)"
    return d, (f"{shown}\n  {r.function}.{r.state} ({r.kind} state), key {d['key']}, batch {r.batch}, "
               f"key group {r.key_group}, partition {r.partition}")


def _read(args) -> Streamed:
    """The rows of ``read``, printed as they come (:mod:`.table`), never held whole. A function's
    state is read in this process, partition store after partition store, a chunk of rows at a
    time (:func:`~spark_state.state_data.readers.by_options.local_rows`: no Spark session); a
    Spark operator's state through Spark's reader in a local session, a Spark partition's rows at
    a time (``toLocalIterator`` without prefetching). With ``--limit N`` a function's state is read
    in one pass (the rows after the first ``N`` counted, not printed); Spark counts an operator's
    rows in its own job and hands over the first ``N``."""
    options = _read_options(args)  # checked before anything is read

    def write(out: TextIO, as_json: bool) -> None:
        if options.operator_id is None:
            from ..state_data.readers.by_options import local_rows

            columns, rows = local_rows(options)
            _print(out, as_json, columns, rows)
            return
        from ..state_data.readers.by_options import read

        with local_spark(args.master, "spark-state read") as spark:
            frame = read(spark, options)
            if args.limit:  # Spark counts in parallel and hands over the first rows only
                total, shown = frame.count(), frame.limit(args.limit)
                rows = (r.asDict(recursive=True) for r in shown.toLocalIterator(prefetchPartitions=False))
                (table.write_json if as_json else table.write_text)(out, frame.columns, rows, total)
            else:
                rows = (r.asDict(recursive=True) for r in frame.toLocalIterator(prefetchPartitions=False))
                _print(out, as_json, frame.columns, rows)

    def _print(out: TextIO, as_json: bool, columns: list[str], rows: Iterator[dict[str, Any]]) -> None:
        limited = table.Limited(rows, args.limit)
        (table.write_json if as_json else table.write_text)(out, columns, limited, limited)

    return Streamed(write)


def _read_options(args) -> "ReadOptions":
    """What ``read`` reads (:meth:`~spark_state.state_data.read_options.ReadOptions.check`:
    errors naming the flags)."""
    from ..state_data.read_options import CLI, OptionError, ReadOptions

    given = common(args)
    if args.operator_state and not args.state:
        raise OptionError("operator_state", "{option} reads the operator state named by STATE: give its name", CLI)
    return ReadOptions.from_cli(args, given["storage_options"], given["process_locations"]).check()


def _erase(args):
    from ..state_data import erase_keys

    keys = list(args.keys)
    if args.keys_file:
        with open(args.keys_file, encoding="utf-8") as lines_in:
            keys += [line.rstrip("\n") for line in lines_in if line.strip()]
    if not keys:
        raise ValueError("give at least one key (KEY arguments or --keys-file)")
    r = erase_keys(args.checkpoint, keys, function=args.function, operator_key=args.operator_key or None,
                   force=args.force, progress=not args.no_progress, as_text=True, **common(args))
    lines = [f"erased {len(keys)} key(s) from the state of batch {r.batch} of {r.checkpoint}, committed as batch "
             f"{r.erasure_batch} ({r.entries_removed} entries, {r.seconds:.1f} s); restart the query"]
    for name, f in r.functions.items():
        entries = ", ".join(f"{what} {n}" for what, n in f["entries"].items()) or "nothing"
        lines.append(f"  {name}: {f['keys_found']} of the keys found; removed {entries}")
    for operator, stores in r.operators.items():
        for store, removed in stores.items():
            entries = ", ".join(f"{what} {n}" for what, n in removed.items()) or "nothing"
            lines.append(f"  operator {operator}, store {store}: removed {entries}")
    return r.to_dict(), "\n".join(lines)
