"""The command line: ``python -m spark_state <command>`` or the ``spark-state`` script.

Commands: ``inspect``, ``savepoint``, ``restore``, ``rescale``, ``migrate``, ``move-state`` (the operations
of :mod:`spark_state.ops`, the same functions as the Python API), ``get`` and ``erase`` (a point
lookup, erasure of keys: :mod:`spark_state.state_data`), ``demo``, ``jar`` and
``server-conf`` (the confs of a Spark Connect server or other driver started elsewhere).

Conventions (every command follows them; keep them when adding one):

* One entry point with subcommands (argparse); ``--help`` on each. This module only parses
  arguments, calls one function of the API and prints its result: no logic of its own.
* Output: a short human summary on stdout; ``--json`` prints the result as one JSON
  document on stdout instead (for scripts). Progress bars and logs go to stderr, and bars
  only when stderr is a terminal (``--no-progress`` turns them off).
* Exit status: 0 on success only; 1 when the operation failed (``error: <message>`` on
  stderr; with ``--json`` also ``{"error": ..., "message": ...}`` on stdout, see
  :func:`_failed`); 2 for bad arguments (argparse's usage message).
* Options with values: ``--partitions N``, ``--batch N``, ``--backend rocksdb|hashmap``,
  ``--to spark-state|hdfs|rocksdb``; process state: ``--process-root DIR`` and
  ``--process-location NAME=URL`` (repeatable); storage: ``--option KEY=VALUE`` (repeatable,
  checkpoint storage options such as ``s3.endpoint_url``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Callable, Optional, Sequence

from .errors import SparkStateError
from .spark.lines import LINES


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m spark_state") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:  # the demo parses its own options
        from .demos.query import main as demo_main

        return demo_main(argv[1:])
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    return args.run(args)


def main_entry() -> None:
    """The ``spark-state`` console script."""
    sys.exit(main(prog="spark-state"))


# ------------------------------------------------------------------------------ parser
def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="spark-state: operate stateful Spark Structured Streaming queries "
                    "(inspect, savepoint, restore, rescale, migrate, move-state) and their state as data (get, read, "
                    "erase); the demo; the JVM shim jar and "
                    "the confs of a Spark driver (e.g. a Spark Connect server) started elsewhere.")
    sub = parser.add_subparsers(dest="command", metavar="<command>")

    p = _command(sub, "inspect", "show what a checkpoint or savepoint holds (reads only; safe on a running query); "
                                 "--json includes the metadata rows (one per state, timer service and Spark "
                                 "operator store)", _inspect)
    p.add_argument("checkpoint", help="the query's checkpointLocation, or a savepoint directory")
    p.add_argument("--no-load", action="store_true",
                   help="do not load any state (faster on large state; no TTL or descriptor details)")
    _process_options(p)

    p = _command(sub, "savepoint", "copy a query's state at a committed batch into a self-contained savepoint "
                                   "(the query may be running)", _savepoint)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("savepoint", help="a new directory for the savepoint")
    p.add_argument("--batch", type=int, help="the committed batch to take (default: the latest)")
    p.add_argument("--allow-no-state", action="store_true",
                   help="take the savepoint even if it holds no state (no stateful operator of Spark's, and no "
                        "process state found: a query that keeps none)")
    _process_options(p)

    p = _command(sub, "restore", "create a new checkpoint from a savepoint, optionally at another partition count",
                 _restore)
    p.add_argument("savepoint", help="a savepoint directory")
    p.add_argument("checkpoint", help="the new checkpoint directory (must not be a checkpoint yet)")
    p.add_argument("--partitions", type=int, help="partition count of the restored query (default: the savepoint's)")
    p.add_argument("--backend", choices=("rocksdb", "hashmap"), default="rocksdb",
                   help="engine backend of the restored state's snapshots (default rocksdb)")
    p.add_argument("--keep-query-id", action="store_true",
                   help="keep the savepoint's query id (default: a new one, like a new Flink job)")
    _process_options(p, _RESTORE_ROOT_HELP)

    p = _command(sub, "rescale", "change the partition count of a stopped query's checkpoint in place", _rescale)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("--partitions", type=int, required=True, help="the new partition count")
    p.add_argument("--force", action="store_true",
                   help="skip the running-query checks (only when you know the query is stopped)")
    _process_options(p)

    p = _command(sub, "migrate", "copy a checkpoint to another state store provider "
                                 "(Spark's HDFS or RocksDB provider <-> spark-state)", _migrate)
    p.add_argument("checkpoint", help="the source checkpoint (never modified)")
    p.add_argument("target", help="the new checkpoint directory")
    p.add_argument("--to", required=True, choices=("spark-state", "hdfs", "rocksdb"), help="the target provider")
    p.add_argument("--batch", type=int, help="the committed batch to migrate (default: the latest)")

    p = _command(sub, "move-state", "move a stopped query's keyed-function state from the former default location "
                                    "(./spark-state/<query id>/<name>) beside its checkpoint "
                                    "(<checkpoint>/spark-state/<name>)", _move_state)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("--process-root", metavar="DIR",
                   help="where the state is, as DIR/<query id>/<name> on local disk (default ./spark-state: the former "
                        "default root, in the directory the query was started from)")

    p = _command(sub, "get", "print one key's value in one keyed state of a query, from its last committed batch "
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
    _process_options(p)

    p = _command(sub, "read", "print a state of a checkpoint or savepoint as rows, through a local Spark session: a "
                              "keyed state, a keyed function's timers (--timers), a keyed state's change feed "
                              "(--start-batch), or a Spark operator's state (--operator)", _read)
    p.add_argument("path", help="the query's checkpointLocation, or a savepoint directory")
    p.add_argument("state", nargs="?", help="the keyed state's name (not with --timers or --operator)")
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
    p.add_argument("--operator", type=int, metavar="ID", help="a Spark operator's state, as Spark's reader shows it")
    p.add_argument("--store", metavar="NAME", help="with --operator: the store (joins have four)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="rows to print (0: all; default 20)")
    p.add_argument("--master", default="local[2]", help="the Spark master of the session (default local[2])")
    p.add_argument("--allow-pickle", action="store_true",
                   help="decode pickled values (unpickling runs whatever the stored bytes say: trusted storage only)")
    _process_options(p)

    p = _command(sub, "erase", "delete keys from every state of a stopped query's keyed functions (values, lists, "
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
    _process_options(p)

    sub.add_parser("demo", help="run the demo job (python -m spark_state demo --help)")

    p = sub.add_parser("jar", help="print the path of the JVM shim jar of the installed pyspark's Spark line (the "
                                   "packaged one; built on first use in a source checkout)",
                       description="Print the shim jar's absolute path for a Spark line (default: the installed "
                                   "pyspark's): the jar packaged in the installed wheel, which carries one per "
                                   "supported line (nothing is compiled), or in a source checkout the jar compiled "
                                   "from its sources (on first use, ~10 s, into ~/.cache/spark-state).")
    p.add_argument("--spark", metavar="LINE",
                   help="the Spark line of the cluster, e.g. 3.5 or 4.2 (a version such as 4.2.1 will do): for a "
                        "spark-submit whose driver has no pyspark; supported: "
                        + ", ".join(line.name for line in LINES))
    p.set_defaults(run=_jar)

    p = sub.add_parser(
        "server-conf", help="print the Spark confs of a driver that runs spark-state (e.g. a Spark Connect server)",
        description="Print the confs spark_state.configure() would set (the shim jar, the state store provider, "
                    "the Python of the workers, engine options) for a Spark driver started elsewhere: "
                    "start-connect-server.sh $(spark-state server-conf), or spark-submit. Default output: "
                    "spark-submit arguments (--conf KEY=VALUE ...).")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the confs as one JSON object")
    out.add_argument("--properties", action="store_true", help="print spark-defaults.conf lines (KEY VALUE)")
    p.add_argument("--backend", choices=("rocksdb", "hashmap"), help="engine backend (default: the engine's, rocksdb)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine / provider option, e.g. snapshotInterval=20 (as in configure(options=...)), repeatable")
    p.add_argument("--python", help="the Python the server's workers run, with spark-state installed "
                                    "(default: the Python running this command)")
    p.set_defaults(run=_server_conf)
    return parser


def _command(sub, name: str, text: str, run: Callable[[argparse.Namespace], Any]) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="checkpoint storage option (e.g. s3.endpoint_url=...), repeatable")
    p.set_defaults(run=lambda args: _run(args, run))
    return p


#: --process-root of the commands that read process state, and of restore, which writes it
_ROOT_HELP = ("root of keyed_process/checkpointed_process state kept under a state_root, as DIR/<query id>/<name> "
              "(state beside the checkpoint, <checkpoint>/spark-state/<name>, is found without it; default: also the "
              "former default root ./spark-state, if it exists)")
_RESTORE_ROOT_HELP = ("write the restored keyed_process/checkpointed_process state under DIR/<new query id>/<name> "
                      "(for a query run with state_root=DIR; default: beside the new checkpoint, "
                      "<checkpoint>/spark-state/<name>, or under the state_root the savepoint's query used)")


def _process_options(p: argparse.ArgumentParser, root_help: str = _ROOT_HELP) -> None:
    p.add_argument("--process-root", metavar="DIR", help=root_help)
    p.add_argument("--process-location", action="append", default=[], metavar="NAME=URL",
                   help="state location of a process operator given an explicit state_location, repeatable")


def _pairs(items: list[str], option: str) -> dict[str, str]:
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


def _common(args: argparse.Namespace) -> dict[str, Any]:
    return {"process_root": args.process_root, "process_locations": _pairs(args.process_location, "--process-location"),
            "storage_options": _pairs(args.option, "--option")}


# ------------------------------------------------------------------------------ commands
#: What an operation that failed raises (anything else is a bug and keeps its traceback).
_FAILURES = (SparkStateError, ValueError, OSError)


def _failed(exc: BaseException, as_json: bool) -> int:
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
    except _FAILURES as exc:
        return _failed(exc, args.json)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print(summary)
    return 0


def _inspect(args):
    from .ops import inspect
    from .state_data import state_metadata
    from .state_data.savepoint_source import is_savepoint

    common = _common(args)
    if is_savepoint(args.checkpoint, common["storage_options"]):
        rows = state_metadata(args.checkpoint, **common)
        return {"savepoint": args.checkpoint, "metadata": rows}, _describe_metadata(args.checkpoint, rows)
    result = inspect(args.checkpoint, load_stores=not args.no_load, **common)
    return result, _describe_inspect(result)


def _describe_metadata(path: str, rows: list[dict[str, Any]]) -> str:
    """The metadata rows as text: one line per state, timer service and operator store."""
    lines = [f"savepoint {path}"]
    for r in rows:
        owner = r["function"] if r["function"] is not None else f"operator {r['operator_id']} {r['operator_name']}"
        types = ", ".join(f"{k} {r[k]}" for k in ("key_columns", "map_key_type", "value_type", "ttl_ms") if r[k])
        lines.append(f"  {r['kind']} {owner}" + (f".{r['name']}" if r["name"] else "") + f": {r['state_type'] or ''}"
                     + (f" ({types})" if types else "") + f", batches {r['min_batch_id']}..{r['max_batch_id']}, "
                     f"{r['num_partitions']} partitions, {r['backend']}")
    return "\n".join(lines)


def _savepoint(args):
    from .ops import savepoint

    r = savepoint(args.checkpoint, args.savepoint, args.batch, progress=not args.no_progress,
                  allow_no_state=args.allow_no_state, **_common(args))
    return r.to_dict(), (f"savepoint of batch {r.batch_id} (query {r.query_id}) written to {r.savepoint}: "
                         f"{len(r.operators)} operator(s), {len(r.process_states)} process state(s), {r.keys} keys, "
                         f"{r.bytes} bytes in {r.files} files, {r.seconds:.1f} s")


def _restore(args):
    from .ops import restore

    r = restore(args.savepoint, args.checkpoint, partitions=args.partitions, backend=args.backend,
                keep_query_id=args.keep_query_id, progress=not args.no_progress, **_common(args))
    locations = "".join(f"\n  process state {n}: {u}" for n, u in r.process_locations.items())
    return r.to_dict(), (f"restored batch {r.batch_id} into {r.checkpoint} at {r.partitions} partitions "
                         f"(query id {r.query_id}, {r.keys} keys, {r.seconds:.1f} s); start the unchanged query "
                         f"with checkpointLocation={r.checkpoint}{locations}")


def _rescale(args):
    from .ops import rescale

    r = rescale(args.checkpoint, args.partitions, force=args.force, progress=not args.no_progress, **_common(args))
    return r.to_dict(), (f"{r.checkpoint}: {r.old_partitions} -> {r.new_partitions} partitions as batch {r.batch_id} "
                         f"({r.keys} keys, {r.seconds:.1f} s); restart the query")


def _migrate(args):
    from .ops import migrate

    r = migrate(args.checkpoint, args.target, to=args.to, batch=args.batch, progress=not args.no_progress,
                storage_options=_pairs(args.option, "--option"))
    d = r.to_dict()
    return d, (f"migrated batch {d['batch_id']} of {d['checkpoint']} from {d['from_provider']} to {d['to_provider']}: "
               f"{d['target']} ({d['keys']} keys, {d['seconds']:.1f} s); restart the unchanged query on it")


def _move_state(args):
    from .ops import move_state

    r = move_state(args.checkpoint, process_root=args.process_root, progress=not args.no_progress,
                   storage_options=_pairs(args.option, "--option"))
    moved = "".join(f"\n  {m['name']}: {m['source']} -> {m['destination']} ({m['files']} files, {m['bytes']} bytes)"
                    for m in r.moved)
    return r.to_dict(), (f"moved the state of {len(r.moved)} operator(s) of query {r.query_id} beside {r.checkpoint} "
                         f"({r.seconds:.1f} s); restart the query{moved}")


def _get(args):
    from .state_data import StateLookup

    with StateLookup(args.path, function=args.function, allow_pickle=args.allow_pickle,
                     **_common(args)) as states:
        r = states.lookup(args.state, states.key_columns.parse(args.key), batch=args.batch)
    d = r.to_dict()
    shown = json.dumps(d["value"]) if r.found else "(no value)"
    return d, (f"{shown}\n  {r.function}.{r.state} ({r.kind} state), key {d['key']}, batch {r.batch}, "
               f"key group {r.key_group}, partition {r.partition}")


def _read(args):
    frame_of = _read_frame(args)  # checks the arguments before a session starts
    from pyspark.sql import SparkSession

    from .spark.session import configure

    active = SparkSession.getActiveSession()  # called from Python with a session running: use it
    spark = active or configure(
        SparkSession.builder.master(args.master).appName("spark-state read")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")).getOrCreate()
    if active is None:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        frame = frame_of(spark)
        total = frame.count()
        shown = frame.limit(args.limit) if args.limit else frame
        columns, rows = frame.columns, [r.asDict(recursive=True) for r in shown.collect()]
    finally:
        if active is None:
            spark.stop()
    text = "\n".join(["\t".join(columns)] + ["\t".join(json.dumps(r[c], default=str) for c in columns) for r in rows]
                     + ([f"({total} rows, {len(rows)} shown: --limit 0 prints all)"] if len(rows) < total else
                        [f"({total} rows)"]))
    return {"columns": columns, "rows": rows, "total": total}, text


def _read_frame(args) -> Callable[[Any], Any]:
    """The DataFrame ``read`` prints, as a function of the session (arguments checked first)."""
    from . import state_data

    common = _common(args)
    if args.end_batch is not None and args.start_batch is None:
        raise ValueError("--end-batch ends a change feed: give --start-batch too")
    if args.start_batch is not None and args.batch is not None:
        raise ValueError("a change feed reads batches --start-batch..--end-batch: give --end-batch, not --batch")
    chosen = [name for name, on in (("--timers", args.timers), ("--start-batch", args.start_batch is not None),
                                    ("--operator", args.operator is not None),
                                    ("--operator-state", args.operator_state)) if on]
    if len(chosen) > 1:
        raise ValueError(f"{' and '.join(chosen)} read different things: give one")
    if args.operator is not None:
        return lambda spark: state_data.read_operator_state(spark, args.path, operator_id=args.operator,
                                                           store_name=args.store, batch=args.batch,
                                                           storage_options=common["storage_options"])
    if args.timers:
        return lambda spark: state_data.read_timers(spark, args.path, function=args.function, batch=args.batch,
                                                    **common)
    if not args.state:
        raise ValueError("name the keyed state to read (or give --timers or --operator ID)")
    if args.operator_state:
        return lambda spark: state_data.read_function_operator_state(spark, args.path, args.state,
                                                                    function=args.function, batch=args.batch,
                                                                    allow_pickle=args.allow_pickle, **common)
    if args.start_batch is not None:
        return lambda spark: state_data.read_change_feed(spark, args.path, args.state, start_batch=args.start_batch,
                                                        end_batch=args.end_batch, function=args.function,
                                                        allow_pickle=args.allow_pickle, **common)
    return lambda spark: state_data.read_keyed_state(spark, args.path, args.state, function=args.function,
                                                    batch=args.batch,
                                                    flatten_collection_types=args.flatten_collection_types,
                                                    allow_pickle=args.allow_pickle, **common)


def _erase(args):
    from .state_data import erase_keys

    keys = list(args.keys)
    if args.keys_file:
        with open(args.keys_file, encoding="utf-8") as lines_in:
            keys += [line.rstrip("\n") for line in lines_in if line.strip()]
    if not keys:
        raise ValueError("give at least one key (KEY arguments or --keys-file)")
    r = erase_keys(args.checkpoint, keys, function=args.function, operator_key=args.operator_key or None,
                   force=args.force, progress=not args.no_progress, as_text=True, **_common(args))
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


def _describe_inspect(r: dict[str, Any]) -> str:
    lines = [f"checkpoint {r['checkpoint']}", f"  query id {r['query_id']}",
             f"  last committed batch {r['last_committed_batch']}"
             + (f" (uncommitted: {r['uncommitted_batches']})" if r["uncommitted_batches"] else ""),
             f"  provider {r['provider']}, {r['partitions']} partitions"]
    for op in r["operators"]:
        lines.append(f"  operator {op['id']} {op['name']}: {op['partitions']} partitions, rows {op['rows']}, "
                     f"{op['bytes']} bytes")
        for s in op["stores"]:
            ttl = "" if s["ttl_stamped"] is None else (", TTL-stamped" if s["ttl_stamped"] else ", no TTL")
            lines.append(f"    store {s['name']}: versions {s['retained_versions']}, rows {s['rows']}, {s['bytes']} "
                         f"bytes, {s['snapshots']} snapshots, {s['changelogs']} changelogs{ttl}")
    for p in r["process_states"]:
        lines.append(f"  process state {p['name']} ({p['kind']}, max parallelism {p['max_parallelism']}): layout "
                     f"{p['layout']}, rows {p['rows']}, at {p['location']}")
        for s in p["states"]:
            value = s.get("value", {})
            state_ttl = s.get("ttl") or {}
            lines.append(f"    state {s['name']}: {s.get('kind')} {value.get('type') or value.get('codec')}"
                         + (f", TTL {state_ttl.get('ttl_ms')} ms" if state_ttl else ""))
        for part in p["partitions"]:
            kg = part.get("key_groups")
            lines.append(f"    partition {part['partition']}: " + (f"key groups {kg[0]}..{kg[1]}, " if kg else "")
                         + f"rows {part.get('rows')}")
    return "\n".join(lines)


def _server_conf(args) -> int:
    """Print :func:`spark_state.server_confs` as spark-submit arguments, properties or JSON."""
    import shlex

    from .spark.session import server_confs

    try:
        confs = server_confs(backend=args.backend, options=_pairs(args.option, "--option"), python=args.python)
    except _FAILURES as exc:
        return _failed(exc, args.json)
    if args.json:
        print(json.dumps(confs, indent=1))
    elif args.properties:
        print("\n".join(f"{key} {value}" for key, value in confs.items()))
    else:
        print(" ".join(f"--conf {shlex.quote(f'{key}={value}')}" for key, value in confs.items()))
    return 0


def _jar(args) -> int:
    """Print the shim jar's absolute path, building it if needed; errors go to stderr."""
    from .spark.jvm import jar_path

    # Show the "building ..." line on stderr: a first build takes a while, stdout stays
    # just the path so that scripts can use $(python -m spark_state jar).
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        print(jar_path(line=args.spark))
    except (SparkStateError, OSError) as exc:  # OSError: e.g. an unwritable cache directory
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
