"""What a checkpoint holds: reads only, safe on a running query.

Reports the query (id, provider, partition count, last committed batch, offsets beyond it),
every stateful operator (id, name, stores, partitions) and per store: the retained versions,
the rows at the last committed batch (from the committed manifests, exact, without loading
any state), the bytes and the snapshot and changelog counts in checkpoint storage, and
whether its values carry TTL stamps (a spark-state store loaded once, partition 0). For
``keyed_process`` / ``checkpointed_process`` state found for the query: the kind, max
parallelism, the layout holding the batch, the key groups and rows of each partition, and
each state's recorded descriptor (kind, type, TTL) from its schema record.

``metadata`` gives the same facts as rows, one per keyed state, operator state and timer service
of each function and per store of each Spark operator (:data:`METADATA_FIELDS`; the rows of
``spark_state.state_data.state_metadata`` and ``format("spark-state-metadata")``).

Nothing is written: stores are opened with a reader run context (never registers or
fences), and only versions of committed batches are read. The TTL *duration* is a conf of
the running query, not part of the checkpoint (see README "TTL for built-in operators"), so
it is not reported; the stamps are.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from .. import constants as C
from ..checkpoint.retention import list_copies, read_manifest
from ..checkpoint.runs import RunContext, RunRegistry
from ..partitioning.keygroups import compute_key_group_range_for_operator_index
from ..storage import CheckpointStorage
from ..keys import system as syskeys
from ..process import location as L
from ..errors import CheckpointFileMissingError
from .checkpoint_reader import SPARKSTATE_PROVIDER, OperatorInfo, SparkCheckpoint, provider_short_name
from .errors import UnsupportedCheckpointError
from .process_locations import find_process_locations
from .state_io import open_committed, process_layout, reader_config


#: snapshots/<version>-<id>.json: one per snapshot (private files are <version>-<id>-<name>)
_DESCRIPTOR_RE = re.compile(r"^\d+-[0-9a-f]+\.json$")

#: The fields of a metadata row, in order (types: :data:`METADATA_TYPES`).
METADATA_FIELDS = ("kind", "function", "operator_id", "operator_name", "name", "state_type", "key_columns",
                   "value_type", "map_key_type", "ttl_ms", "min_batch_id", "max_batch_id", "num_partitions",
                   "backend", "location")
#: Each field's Spark type, as DDL (``key_columns`` is a string: ``"k string, n bigint"``).
METADATA_TYPES = {"operator_id": "int", "ttl_ms": "bigint", "min_batch_id": "bigint", "max_batch_id": "bigint",
                  "num_partitions": "int"}
#: ``kind`` of a metadata row.
KEYED_STATE, OPERATOR_STATE, TIMERS, SPARK_OPERATOR = "keyed_state", "operator_state", "timers", "spark_operator"
#: Which schema records are which kind of state.
_RECORD_TAGS = ((syskeys.KEYED_SCHEMA_TAG, KEYED_STATE), (syskeys.OPERATOR_SCHEMA_TAG, OPERATOR_STATE))


def inspect(checkpoint: str, *, process_root: Optional[str] = None, process_locations: Optional[dict[str, str]] = None,
            storage_options: Optional[dict[str, str]] = None, load_stores: bool = True) -> dict[str, Any]:
    """A JSON-ready description of ``checkpoint`` (see the module docstring).

    ``load_stores=False`` skips loading state (no TTL and descriptor details; much faster
    on large state)."""
    ckpt = SparkCheckpoint(checkpoint, storage_options)
    offsets = ckpt.batch_ids("offsets")
    last = ckpt.last_committed()
    commits = ckpt.batch_ids("commits")
    out: dict[str, Any] = {
        "checkpoint": ckpt.url,
        "query_id": ckpt.query_id(),
        "first_committed_batch": commits[0] if commits and last is not None else None,
        "last_committed_batch": last,
        "latest_offset_batch": offsets[-1] if offsets else None,
        "uncommitted_batches": [b for b in offsets if last is None or b > last],
    }
    if last is None:
        out |= {"provider": None, "partitions": None, "operators": [], "process_states": [], "metadata": []}
        return out
    provider = ckpt.provider_class(last)
    out["provider"] = provider_short_name(provider)
    out["provider_class"] = provider
    out["partitions"] = ckpt.partitions(last)
    version = last + 1
    ops = []
    for op in ckpt.operators():
        # the last committed batch's count (the offset log's), whatever the metadata says
        op = op.with_partitions(out["partitions"])
        stores = []
        for info in op.stores:
            if provider == SPARKSTATE_PROVIDER:
                store = _sparkstate_store(ckpt, op, info.name, version, load_stores)
            else:
                store = _spark_store(ckpt, op, info.name)
            stores.append(store | _store_schemas(ckpt, op, info.name))
        ops.append({"id": op.id, "name": op.name, "partitions": op.partitions, "store_names": op.store_names,
                    "rows": _sum(s.get("rows") for s in stores), "bytes": sum(s["bytes"] for s in stores),
                    "stores": stores})
    out["operators"] = ops
    out["process_states"] = [
        _process(loc, version, load_stores)
        for loc in find_process_locations(ckpt.storage, out["query_id"], process_root, process_locations or {},
                                          storage_options or {})
    ]
    out["metadata"] = metadata_rows(out)
    return out


def metadata_rows(described: dict[str, Any]) -> list[dict[str, Any]]:
    """The metadata rows of an :func:`inspect`-shaped description (a savepoint's is built alike
    by ``spark_state.state_data.readers.metadata``): per state of each function (its schema record), a
    timer service per keyed function, and per store of each Spark operator."""
    first, last = described.get("first_committed_batch"), described["last_committed_batch"]
    rows: list[dict[str, Any]] = []

    def row(**fields: Any) -> None:
        rows.append({f: fields.get(f) for f in METADATA_FIELDS} | {"min_batch_id": first, "max_batch_id": last})

    for p in described["process_states"]:
        key = p.get("key") or {}
        key_columns = ", ".join(f"{c} {t}" for c, t in zip(key.get("columns", []), key.get("types", []))) or None
        common = {"function": p["name"], "num_partitions": p["parallelism"], "backend": "spark-state",
                  "location": p["location"]}
        for state in p["states"]:
            kind = state.get("scope", KEYED_STATE)
            ttl = state.get("ttl") or {}
            row(kind=kind, name=state["name"], state_type=state.get("kind"),
                key_columns=key_columns if kind == KEYED_STATE else None, value_type=_type_of(state.get("value")),
                map_key_type=_type_of(state.get("key")), ttl_ms=ttl.get("ttl_ms"), **common)
        if p["kind"] == "keyed":
            row(kind=TIMERS, state_type="timers", key_columns=key_columns, value_type="bigint", **common)
    for op in described["operators"]:
        for store in op["stores"]:
            key, value = store.get("key_schema"), store.get("value_schema")
            row(kind=SPARK_OPERATOR, operator_id=op["id"], operator_name=op["name"], name=store["name"],
                state_type="value" if value else None, key_columns=_columns_ddl(key), value_type=_struct_ddl(value),
                num_partitions=op["partitions"], backend=described.get("provider"),
                location=store.get("location") or f"{described['checkpoint'].rstrip('/')}/state/{op['id']}")
    return rows


def _store_schemas(ckpt: SparkCheckpoint, op: OperatorInfo, store: str) -> dict[str, Any]:
    """A Spark operator store's key and value schemas (Spark's StructType JSON), as its schema
    file records them; an unreadable or missing file leaves them out (the rest still describes)."""
    try:
        key, value = ckpt.store_schema(op, store)
    except (UnsupportedCheckpointError, CheckpointFileMissingError):
        return {}
    return {"key_schema": key, "value_schema": value}


def _columns_ddl(schema: Optional[dict]) -> Optional[str]:
    """A StructType JSON's columns as ``"name type, ..."`` (the form of a function's key columns)."""
    if not schema:
        return None
    from pyspark.sql import types as T  # pure Python: no session, no JVM

    return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in T.StructType.fromJson(schema).fields)


def _struct_ddl(schema: Optional[dict]) -> Optional[str]:
    """A StructType JSON as Spark's type string (``struct<count:bigint>``), as the reader types
    the ``value`` column."""
    if not schema:
        return None
    from pyspark.sql import types as T

    return T.StructType.fromJson(schema).simpleString()


def _type_of(snapshot: Optional[dict]) -> Optional[str]:
    """A serializer snapshot's type: the Spark type, or the serializer (pickle, a class)."""
    if not snapshot:
        return None
    return snapshot.get("type") or snapshot.get("class") or snapshot.get("codec")


def _sum(values) -> Optional[int]:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _bytes_and_counts(storage: CheckpointStorage, dirs: tuple[str, ...]) -> tuple[int, dict[str, int]]:
    total = 0
    counts: dict[str, int] = {}
    for d in dirs:
        names = [n for n in storage.list_dir(d) if not n.startswith(".")]
        counts[d or "files"] = len(names)
        total += sum(storage.size(f"{d}/{n}" if d else n) for n in names)
    return total, counts


def _sparkstate_store(ckpt: SparkCheckpoint, op: OperatorInfo, store: str, version: int, load: bool) -> dict[str, Any]:
    versions: set[int] = set()
    rows = 0
    total = 0
    snapshots = changelogs = 0
    stamped = None
    for p in range(op.partitions):
        storage = ckpt.store_storage(op, p, store)
        copies = list_copies(storage)
        versions.update(copies)
        runs = RunContext(RunRegistry(storage), None)
        runs.refresh()
        rank = runs.choose(version, copies.get(version, []))
        rows += read_manifest(storage, version, rank).num_keys if rank is not None else 0
        size, counts = _bytes_and_counts(storage, (C.MANIFEST_DIR, C.CHANGELOG_DIR, C.SNAPSHOT_DIR, C.SHARED_DIR))
        total += size
        snapshots += sum(1 for n in storage.list_dir(C.SNAPSHOT_DIR) if _DESCRIPTOR_RE.match(n))
        changelogs += counts[C.CHANGELOG_DIR]
        if load and p == 0 and rank is not None:
            s = open_committed(storage, version, reader_config())
            try:
                stamped = s.get(syskeys.marker_key(b"")) is not None
            finally:
                s.close()
    ordered = sorted(versions)
    return {"name": store, "retained_versions": _span(ordered), "rows": rows, "bytes": total,
            "snapshots": snapshots, "changelogs": changelogs, "ttl_stamped": stamped}


def _spark_store(ckpt: SparkCheckpoint, op: OperatorInfo, store: str) -> dict[str, Any]:
    """A store of Spark's HDFS or RocksDB provider: files only (rows need the provider)."""
    total = 0
    versions: set[int] = set()
    snapshots = changelogs = 0
    for p in range(op.partitions):
        storage = ckpt.store_storage(op, p, store)
        size, _ = _bytes_and_counts(storage, ("", "SSTs"))
        total += size
        for name in storage.list_dir(""):
            stem, _, ext = name.partition(".")
            if stem.isdigit():
                versions.add(int(stem))
                snapshots += ext in ("snapshot", "zip")
                changelogs += ext in ("delta", "changelog")
    return {"name": store, "retained_versions": _span(sorted(versions)), "rows": None, "bytes": total,
            "snapshots": snapshots, "changelogs": changelogs, "ttl_stamped": None}


def _process(loc, version: int, load: bool) -> dict[str, Any]:
    storage = loc.storage()
    layout = process_layout(storage, version)
    partitions = []
    states: dict[tuple[str, str], dict[str, Any]] = {}
    for i in range(layout.parallelism):
        entry: dict[str, Any] = {"partition": i}
        if loc.max_parallelism:
            kg = compute_key_group_range_for_operator_index(loc.max_parallelism, layout.parallelism, i)
            entry["key_groups"] = [kg.start, kg.end]
        store_storage = storage.child(layout.store_path(i))
        s = open_committed(store_storage, layout.store_version(version), reader_config(), layout.base,
                           registry=storage) if load else None
        try:
            if s is not None:
                entry["rows"] = s.num_keys()
                for tag, _ in _RECORD_TAGS:
                    add_records(states, s.iterate(*syskeys.record_range(tag)))
        finally:
            if s is not None:
                s.close()
        partitions.append(entry)
    key = L.read_meta(storage).get("key") if storage.exists(L.META_FILE) else None
    return {"name": loc.name, "location": loc.url, "kind": loc.kind, "max_parallelism": loc.max_parallelism,
            "parallelism": layout.parallelism, "layout": layout.name, "rows": _sum(p.get("rows") for p in partitions),
            "key": key, "states": record_list(states), "partitions": partitions}


def add_records(states: dict[tuple[str, str], dict[str, Any]], entries: Any) -> None:
    """Add the schema records among ``entries`` (``(key, value)`` pairs, any keys) to ``states``,
    by ``(scope, name)``: the first record of a state wins (partitions record the same)."""
    for key, value in entries:
        for tag, scope in _RECORD_TAGS:
            low, high = syskeys.record_range(tag)
            if low <= key < high:
                name = syskeys.name_of_record_key(key).decode("utf-8", "replace")
                try:
                    states.setdefault((scope, name), json.loads(value))
                except ValueError:
                    states.setdefault((scope, name), {"unreadable": True})


def record_list(states: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """``states`` as inspect lists them: sorted by name, each with its ``scope``."""
    by_name = sorted(states.items(), key=lambda item: item[0][::-1])
    return [{"name": name, "scope": scope, **d} for (scope, name), d in by_name]


def _span(versions: list[int]) -> Optional[str]:
    if not versions:
        return None
    return f"{versions[0]}..{versions[-1]}" if len(versions) > 1 else str(versions[0])
