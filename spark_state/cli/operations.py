"""The operations commands: ``inspect``, ``savepoint``, ``restore``, ``rescale``, ``migrate`` and
``move-state``, each one call of :mod:`spark_state.ops` (see :mod:`spark_state.cli` for the conventions)."""

from __future__ import annotations

from typing import Any

from .arguments import (
    command,
    common,
    deprecated_alias,
    process_options,
    storage_options,
    target_storage_option,
    target_storage_options,
)

#: --process-root of restore, which writes process state
_RESTORE_ROOT_HELP = ("write the restored keyed_process/checkpointed_process state under DIR/<new query id>/<name> "
                      "(for a query run with state_root=DIR; default: beside the new checkpoint, "
                      "<checkpoint>/spark-state/<name>, or under the state_root the savepoint's query used)")


def add_commands(sub) -> None:
    """Add the operations commands to the subparsers ``sub``."""
    p = command(sub, "inspect", "show what a checkpoint or savepoint holds (reads only; safe on a running query); "
                                "--json includes the metadata rows (one per state, timer service and Spark "
                                "operator store)", _inspect)
    p.add_argument("checkpoint", help="the query's checkpointLocation, or a savepoint directory")
    p.add_argument("--no-load-stores", action="store_true",
                   help="do not load any state (faster on large state; no TTL or descriptor details)")
    deprecated_alias(p, "--no-load", "--no-load-stores", nargs=0, const=True)
    process_options(p)

    p = command(sub, "savepoint", "copy a query's state at a committed batch into a self-contained savepoint "
                                  "(the query may be running)", _savepoint)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("savepoint", help="a new directory for the savepoint")
    p.add_argument("--batch", type=int, help="the committed batch to take (default: the latest)")
    p.add_argument("--allow-no-state", action="store_true",
                   help="take the savepoint even if it holds no state (no stateful operator of Spark's, and no "
                        "process state found: a query that keeps none)")
    process_options(p)
    target_storage_option(p, "the savepoint directory")

    p = command(sub, "restore", "create a new checkpoint from a savepoint, optionally at another partition count",
                _restore)
    p.add_argument("savepoint", help="a savepoint directory")
    p.add_argument("checkpoint", help="the new checkpoint directory (must not be a checkpoint yet)")
    p.add_argument("--partitions", type=int, help="partition count of the restored query (default: the savepoint's)")
    p.add_argument("--backend", choices=("rocksdb", "hashmap"), default="rocksdb",
                   help="engine backend of the restored state's snapshots (default rocksdb)")
    p.add_argument("--keep-query-id", action="store_true",
                   help="keep the savepoint's query id (default: a new one, like a new Flink job)")
    process_options(p, _RESTORE_ROOT_HELP)
    target_storage_option(p, "the new checkpoint and the process state restored")

    p = command(sub, "rescale", "change the partition count of a stopped query's checkpoint in place", _rescale)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("--partitions", type=int, required=True, help="the new partition count")
    p.add_argument("--force", action="store_true",
                   help="skip the running-query checks (only when you know the query is stopped)")
    process_options(p)

    p = command(sub, "migrate", "copy a checkpoint to another state store provider "
                                "(Spark's HDFS or RocksDB provider <-> spark-state)", _migrate)
    p.add_argument("checkpoint", help="the source checkpoint (never modified)")
    p.add_argument("target", help="the new checkpoint directory")
    p.add_argument("--to", required=True, choices=("spark-state", "hdfs", "rocksdb"), help="the target provider")
    p.add_argument("--batch", type=int, help="the committed batch to migrate (default: the latest)")
    target_storage_option(p, "the new checkpoint and the process state copied beside it")

    p = command(sub, "move-state", "move a stopped query's keyed-function state from the former default location "
                                   "(./spark-state/<query id>/<name>) beside its checkpoint "
                                   "(<checkpoint>/spark-state/<name>)", _move_state)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("--process-root", metavar="DIR",
                   help="where the state is, as DIR/<query id>/<name> on local disk (default ./spark-state: the former "
                        "default root, in the directory the query was started from)")


def _inspect(args):
    from ..ops import inspect
    from ..state_data import state_metadata
    from ..state_data.location.savepoints import is_savepoint

    given = common(args)
    if is_savepoint(args.checkpoint, given["storage_options"]):
        rows = state_metadata(args.checkpoint, **given)
        return {"savepoint": args.checkpoint, "metadata": rows}, _describe_metadata(args.checkpoint, rows)
    result = inspect(args.checkpoint, load_stores=not args.no_load_stores, **given)
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
    from ..ops import savepoint

    r = savepoint(args.checkpoint, args.savepoint, args.batch, progress=not args.no_progress,
                  allow_no_state=args.allow_no_state, target_storage_options=target_storage_options(args),
                  **common(args))
    return r.to_dict(), (f"savepoint of batch {r.batch_id} (query {r.query_id}) written to {r.savepoint}: "
                         f"{len(r.operators)} operator(s), {len(r.process_states)} process state(s), {r.keys} keys, "
                         f"{r.bytes} bytes in {r.files} files, {r.seconds:.1f} s")


def _restore(args):
    from ..ops import restore

    r = restore(args.savepoint, args.checkpoint, partitions=args.partitions, backend=args.backend,
                keep_query_id=args.keep_query_id, progress=not args.no_progress,
                target_storage_options=target_storage_options(args), **common(args))
    locations = "".join(f"\n  process state {n}: {u}" for n, u in r.process_locations.items())
    return r.to_dict(), (f"restored batch {r.batch_id} into {r.checkpoint} at {r.partitions} partitions "
                         f"(query id {r.query_id}, {r.keys} keys, {r.seconds:.1f} s); start the unchanged query "
                         f"with checkpointLocation={r.checkpoint}{locations}")


def _rescale(args):
    from ..ops import rescale

    r = rescale(args.checkpoint, args.partitions, force=args.force, progress=not args.no_progress, **common(args))
    return r.to_dict(), (f"{r.checkpoint}: {r.old_partitions} -> {r.new_partitions} partitions as batch {r.batch_id} "
                         f"({r.keys} keys, {r.seconds:.1f} s); restart the query")


def _migrate(args):
    from ..ops import migrate

    r = migrate(args.checkpoint, args.target, to=args.to, batch=args.batch, progress=not args.no_progress,
                storage_options=storage_options(args), target_storage_options=target_storage_options(args))
    d = r.to_dict()
    return d, (f"migrated batch {d['batch_id']} of {d['checkpoint']} from {d['from_provider']} to {d['to_provider']}: "
               f"{d['target']} ({d['keys']} keys, {d['seconds']:.1f} s); restart the unchanged query on it")


def _move_state(args):
    from ..ops import move_state

    r = move_state(args.checkpoint, process_root=args.process_root, progress=not args.no_progress,
                   storage_options=storage_options(args))
    moved = "".join(f"\n  {m['name']}: {m['source']} -> {m['destination']} ({m['files']} files, {m['bytes']} bytes)"
                    for m in r.moved)
    return r.to_dict(), (f"moved the state of {len(r.moved)} operator(s) of query {r.query_id} beside {r.checkpoint} "
                         f"({r.seconds:.1f} s); restart the query{moved}")


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
