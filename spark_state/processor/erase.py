"""Erasure: delete keys from every state of a stopped query's keyed functions, in one call.

::

    from spark_state.processor import erase_keys
    erase_keys("/ckpt", ["alice", "bob"])          # every keyed function of the query
    spark-state erase /ckpt alice bob [--function NAME] [--keys-file FILE] [--json]

For each keyed function (or the one named), every entry of the given keys goes: value, list and
map state entries, timers, and the TTL expiry index entries that name them (key layouts:
:mod:`spark_state.keys`). Operator state is not keyed and stays; schema records and TTL markers
stay.

How: as an in-place rescale to the same partition count (:mod:`spark_state.ops.rescale`).
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

Older batches keep the keys until retention removes their versions (``retainedVersions``); a
savepoint taken before the erasure keeps them too. The query must be stopped
(:class:`~spark_state.ops.errors.QueryRunningError` otherwise). Keys in the state of Spark's own
operators (the provider's) are not erased by this call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Optional

from ..keys import keyed as K
from ..keys import system as syskeys
from ..keys import timers as TK
from ..keys.keygroup_prefix import KEY_GROUP_KEYSPACE_END
from ..ops.process_locations import ProcessLocation, find_process_locations
from ..ops.rescale import prepare_rewrite, rewrite_as_new_batch
from ..ops.state_io import process_entries, reader_config
from ..process import location as L
from ..process.plan import KEYED
from .source import KeyedSource, choose

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

    @property
    def entries_removed(self) -> int:
        return sum(sum(f["entries"].values()) for f in self.functions.values())

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "batch": self.batch, "erasure_batch": self.erasure_batch,
                "functions": self.functions, "entries_removed": self.entries_removed, "seconds": self.seconds}


#: How ``ErasureResult.functions[...]["entries"]`` names what is not a keyed state.
TIMERS = "<timers>"
TTL_INDEX = "<ttl index>"


def erase_keys(checkpoint: str, keys: Iterable[Any], *, function: Optional[str] = None,
               storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
               process_locations: Optional[Mapping[str, str]] = None, force: bool = False,
               progress: bool = True, as_text: bool = False) -> ErasureResult:
    """Delete ``keys`` from every state of the query's keyed functions (or of ``function``) as of
    its last committed batch (see the module docstring); returns what was removed.

    ``keys`` as :meth:`~.lookup.StateLookup.get` takes them (a value for one key column; a tuple or
    a dict for several); with ``as_text``, as typed on the command line, parsed by each function's
    key columns (:meth:`~.keys.KeyColumns.parse`). ``force`` skips the running-query check (only
    for a query known stopped).

    :raises QueryRunningError: the checkpoint shows a batch under way.
    :raises KeyMismatchError: a key does not fit a function's key columns.
    """
    started = time.perf_counter()
    wanted = list(keys)
    if not wanted:
        raise ValueError("give at least one key to erase")
    rewrite = prepare_rewrite(checkpoint, dict(storage_options or {}), force, "erase keys")
    ckpt, last = rewrite.ckpt, rewrite.last
    processes = find_process_locations(ckpt.storage, ckpt.query_id(), process_root, dict(process_locations or {}),
                                       dict(storage_options or {}))
    keyed = [loc for loc in processes if loc.kind == KEYED]
    if function is not None or not keyed:  # names what there is when the function is unknown or none is keyed
        keyed = [choose(keyed, function, ckpt, process_root)]
    erasures: dict[str, _Erasure] = {}
    for loc in keyed:
        columns = KeyedSource(ckpt, loc).key_columns
        erasures[loc.name] = _Erasure({columns.encode(columns.parse(k) if as_text else columns.values(k))
                                       for k in wanted})
    config = reader_config()

    def entries_of(loc: ProcessLocation, layout: L.Layout, partition: int) -> Iterable[tuple[bytes, bytes]]:
        entries = process_entries(loc.storage(), layout, partition, last + 1, config)
        return erasures[loc.name].kept(entries) if loc.name in erasures else entries

    rewrite_as_new_batch(rewrite, rewrite.partitions, processes, progress, entries_of)
    return ErasureResult(ckpt.url, last, last + 1, {name: e.report() for name, e in erasures.items()},
                         round(time.perf_counter() - started, 3))


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
    if key[:1] < KEY_GROUP_KEYSPACE_END:
        if K.state_name_of(key) == TK.TIMER_STATE_NAME:
            return TIMERS, TK.split_timer_key(key)[3]
        _, name, key_bytes, _ = K.split_entry(key)
        return name.decode("utf-8", "replace"), key_bytes
    if key[:len(syskeys.TTL_INDEX_TAG) + 1] == syskeys.SYSTEM_PREFIX + syskeys.TTL_INDEX_TAG:
        data_key = syskeys.data_key_of_index_key(key)
        if data_key[:1] < KEY_GROUP_KEYSPACE_END and K.state_name_of(data_key) != TK.TIMER_STATE_NAME:
            return TTL_INDEX, K.split_entry(data_key)[2]
    return "", None

