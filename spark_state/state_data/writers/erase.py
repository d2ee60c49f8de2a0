"""Erasure: delete keys from every state of a stopped query, in one call.

::

    from spark_state.state_data import erase_keys
    erase_keys("/ckpt", ["alice", "bob"])          # every keyed function of the query
    erase_keys("/ckpt", ["alice"], operator_key=["user"])   # and Spark's operators' rows of user alice
    spark-state erase /ckpt alice bob [--function NAME] [--operator-key COL] [--keys-file FILE] [--json]

For each keyed function (or the one named), every entry of the given keys goes: value, list and
map state entries, timers, and the TTL expiry index entries that name them (key layouts:
:mod:`spark_state.keys`). Operator state is not keyed and stays; schema records and TTL markers
stay.

How: as an in-place rewrite at the same partition count (:mod:`spark_state.ops.rewrite`).
From the last committed batch ``N`` it writes ``offsets/N+1`` (the same source offsets: a batch
that reads no new input), then state version ``N+2``: every keyed function's state of batch
``N`` without the erased keys' entries, in a new layout of the same parallelism, and a copy of
every other state (Spark operators' stores, other functions, operator state), all by one tool
run; ``commits/N+1`` is written last, the commit point. The next run of the query starts at
batch ``N+2`` from that state and never sees the keys again.

Interrupted before the commit point, the checkpoint is as it was -- its last committed batch is
still ``N``, and batch ``N``'s state is untouched -- and ``offsets/N+1`` names the interrupted
erasure (a marker file): running the same call again redoes it (so does a restart of the
query, which then runs batch ``N+1`` without the erasure). Every state is copied, so the cost
is that of a full copy of the query's state; a progress bar shows it on a terminal.

**Spark's operators.** With ``operator_key`` (column names), the rows of every store of Spark's
stateful operators on spark-state's provider whose key has those top-level columns and whose
values there equal an erased key go too (an aggregation by ``user`` and window loses every
window of the user; a join both sides' rows and counts; a dedup the user's rows), with the TTL
index entries naming them. The key rows are read from their ``UnsafeRow`` bytes
(:mod:`spark_state.keys.unsafe_row`: string, binary, integral, boolean, floating and date
columns). Stores without those columns are copied unchanged; if no store has them, the call
fails before writing, listing each store's key columns. Without ``operator_key`` the provider's
state is copied unchanged.

Older batches keep the keys until retention removes their versions (``retainedVersions``); a
savepoint taken before the erasure keeps them too. The query must be stopped
(:class:`~spark_state.ops.errors.QueryRunningError` otherwise).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from ...keys import entries
from ...keys import provider as provider_keys
from ...keys import system as syskeys
from ...keys.entries import owner_of
from ...keys.unsafe_row import UnsafeRowReader
from ...ops.checkpoint_reader import OperatorInfo
from ...ops.process_locations import ProcessLocation
from ...ops.rewrite import prepare_rewrite, rewrite_as_new_batch
from ...ops.state_io import process_entries, reader_config, store_entries
from ...process import location as L
from ...process.plan import KEYED
from ..errors import KeyMismatchError
from ..key_columns import KeyColumns
from ..location.functions import KeyedSource, choose

__all__ = ["ErasureResult", "erase_keys"]


@dataclass
class ErasureResult:
    """What :func:`erase_keys` removed, per keyed function."""

    checkpoint: str
    #: the batch whose state the keys were erased from
    batch: int
    #: the batch the erasure committed (reads no input); the query continues after it
    erasure_batch: int
    #: function name -> {"keys_found": n, "entries": {state: n, "<timers>": n, "<ttl index>": n}}
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    #: ``"<operator id> <operator name>"`` -> {store name: {"rows": n, "<ttl index>": n}} (``operator_key``)
    operators: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @property
    def entries_removed(self) -> int:
        return (sum(sum(f["entries"].values()) for f in self.functions.values())
                + sum(sum(s.values()) for o in self.operators.values() for s in o.values()))

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "batch": self.batch, "erasure_batch": self.erasure_batch,
                "functions": self.functions, "operators": self.operators, "entries_removed": self.entries_removed,
                "seconds": self.seconds}


#: How ``ErasureResult.functions[...]["entries"]`` names what is not a keyed state.
TIMERS = "<timers>"
TTL_INDEX = "<ttl index>"


def erase_keys(checkpoint: str, keys: Iterable[Any], *, function: Optional[str] = None,
               operator_key: Optional[Sequence[str]] = None,
               storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
               process_locations: Optional[Mapping[str, str]] = None, force: bool = False,
               progress: bool = True, as_text: bool = False) -> ErasureResult:
    """Delete ``keys`` from every state of the query's keyed functions (or of ``function``) and,
    with ``operator_key`` (key column names), from the rows of Spark's operators keyed by those
    columns, as of its last committed batch (see the module docstring); returns what was removed.

    ``keys`` as :meth:`~..readers.lookup.StateLookup.get` takes them (a value for one key column; a tuple or
    a dict for several); with ``as_text``, as typed on the command line, parsed by each function's
    key columns (:meth:`~..key_columns.KeyColumns.parse`). ``force`` skips the running-query check (only
    for a query known stopped).

    :raises QueryRunningError: the checkpoint shows a batch under way.
    :raises KeyMismatchError: a key does not fit a function's key columns.
    """
    started = time.perf_counter()
    wanted = list(keys)
    if not wanted:
        raise ValueError("give at least one key to erase")
    rewrite = prepare_rewrite(checkpoint, dict(storage_options or {}), force, "erase keys", process_root=process_root,
                              process_locations=dict(process_locations or {}))
    ckpt, last, processes = rewrite.ckpt, rewrite.last, rewrite.processes
    keyed = [loc for loc in processes if loc.kind == KEYED]
    if function is not None or (not keyed and not operator_key):  # names what there is: an unknown function, none
        keyed = [choose(keyed, function, ckpt, process_root, process_locations)]
    stores = _operator_erasures(rewrite, list(operator_key), wanted, as_text) if operator_key else {}
    erasures: dict[str, _Erasure] = {}
    for loc in keyed:
        columns = KeyedSource(ckpt, loc).key_columns
        erasures[loc.name] = _Erasure({columns.encode(columns.parse(k) if as_text else columns.values(k))
                                       for k in wanted})
    config = reader_config()

    def entries_of(loc: ProcessLocation, layout: L.Layout, partition: int) -> Iterable[tuple[bytes, bytes]]:
        entries = process_entries(loc.storage(), layout, partition, last + 1, config)
        return erasures[loc.name].kept(entries) if loc.name in erasures else entries

    def store_entries_of(op: OperatorInfo, store: str, partition: int) -> Iterable[tuple[bytes, bytes]]:
        entries = store_entries(ckpt.store_storage(op, partition, store), last + 1, config)
        erasure = stores.get((op.id, store))
        return erasure.kept(entries) if erasure is not None else entries

    rewrite_as_new_batch(rewrite, rewrite.partitions, progress, entries_of, store_entries_of)
    operators: dict[str, dict[str, dict[str, int]]] = {}
    for op in rewrite.operators:
        for info in op.stores:
            if (op.id, info.name) in stores:
                operators.setdefault(f"{op.id} {op.name}", {})[info.name] = stores[(op.id, info.name)].removed
    return ErasureResult(ckpt.url, last, last + 1, {name: e.report() for name, e in erasures.items()},
                         round(time.perf_counter() - started, 3), operators)


def _operator_erasures(rewrite: Any, columns: list[str], wanted: list[Any],
                       as_text: bool) -> dict[tuple[int, str], "_StoreErasure"]:
    """The provider stores keyed by ``columns`` (top-level fields of their key schemas), each with
    the erased keys as values of those columns typed as the store types them.

    :raises KeyMismatchError: no store's key has the columns (the message lists each store's)."""
    from pyspark.sql.types import StructType

    found: dict[tuple[int, str], _StoreErasure] = {}
    seen: list[str] = []
    for op in rewrite.operators:
        for info in op.stores:
            fields = StructType.fromJson(rewrite.ckpt.store_schema(op, info.name)[0]).fields
            names = [f.name for f in fields]
            seen.append(f"operator {op.id} {op.name} store {info.name}: {', '.join(names) or '(no key)'}")
            if not all(c in names for c in columns):
                continue
            ordinals = [names.index(c) for c in columns]
            types = [f.dataType.simpleString() for f in fields]
            key_columns = KeyColumns(tuple(columns), tuple(types[i] for i in ordinals))
            values = {key_columns.parse(k) if as_text else key_columns.values(k) for k in wanted}
            try:
                reader = UnsafeRowReader(types, ordinals)
            except ValueError as exc:
                raise KeyMismatchError(f"operator {op.id} {op.name} store {info.name}: {exc}") from None
            found[(op.id, info.name)] = _StoreErasure(values, reader, info.num_cols_prefix_key)
    if not found:
        raise KeyMismatchError(f"no store of Spark's operators has the key column(s) {columns} (key columns: "
                               f"{'; '.join(seen) or 'the query has no stateful operator of Spark'}); nothing erased")
    return found


class _StoreErasure:
    """One provider store's erased keys (values of its key columns), and the rows removed."""

    def __init__(self, values: set[tuple], reader: UnsafeRowReader, prefix_columns: int) -> None:
        self.values, self.reader, self.prefix_columns = values, reader, prefix_columns
        self.removed: dict[str, int] = {}

    def _matches(self, data_key: bytes) -> bool:
        return self.reader.values(provider_keys.key_row(data_key, self.prefix_columns)) in self.values

    def kept(self, entries: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        removed = self.removed
        for key, value in entries:
            if key[:1] == syskeys.SYSTEM_PREFIX:
                what = TTL_INDEX
                gone = key[1:2] == syskeys.TTL_INDEX_TAG and self._matches(syskeys.data_key_of_index_key(key))
            else:
                what, gone = "rows", self._matches(key)
            if gone:
                removed[what] = removed.get(what, 0) + 1
                continue
            yield key, value


class _Erasure:
    """One keyed function's erased keys, and what was removed of them."""

    def __init__(self, key_set: set[bytes]) -> None:
        self.key_set = key_set
        self.removed: dict[str, int] = {}
        self.found: set[bytes] = set()

    def kept(self, entries: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        key_set, removed = self.key_set, self.removed
        for key, value in entries:
            what, key_bytes = _owner(key)
            if key_bytes is not None and key_bytes in key_set:
                removed[what] = removed.get(what, 0) + 1
                if what != TTL_INDEX:
                    self.found.add(key_bytes)
                continue
            yield key, value

    def report(self) -> dict[str, Any]:
        return {"keys_found": len(self.found), "entries": dict(sorted(self.removed.items()))}


def _owner(key: bytes) -> tuple[str, Optional[bytes]]:
    """``(what the entry is, the key bytes it belongs to)``: a keyed state's name, timers or the
    TTL index; ``None`` for entries no key owns (operator state, schema records, TTL markers)."""
    owner = owner_of(key)
    if owner.kind == entries.STATE:
        assert owner.state is not None
        return owner.state.decode("utf-8", "replace"), owner.key
    if owner.kind == entries.TIMERS:
        return TIMERS, owner.key
    if owner.kind == entries.TTL_INDEX and owner.key is not None:
        return TTL_INDEX, owner.key
    return "", None

