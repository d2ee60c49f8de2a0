"""Schema records at work: checked when a keyed state registers, merged on rescale.

The I/O around the pure pieces (:mod:`.schema` for the record, :mod:`.compatibility` for
the verdict). :func:`restore_keyed_schema` runs when a function registers a keyed state
(``ctx.get_state(...)`` in ``open``), before any element is processed:

* no record (a new state, or one written by a release without records): write one from
  the descriptor, trusting it;
* a record equal to the descriptor's: nothing to do;
* otherwise the verdict: *incompatible* raises
  :class:`~spark_state.state.errors.StateSchemaIncompatibleError` before anything is
  staged; *as is* rewrites the record; *migrate* rewrites every stored value of the state
  (a full scan, as the TTL layout migration does), keeping each entry's TTL stamp, and
  the record, all in the pending epoch: the commit makes both durable or neither.

A migration holds one chunk of the state (:data:`MIGRATION_CHUNK` values), in two passes. The
first converts every value and stages nothing, so a value that cannot be converted raises
``StateSchemaIncompatibleError`` with nothing staged -- callers may catch it and go on with the
epoch (register the state under a new name), so a half-migrated state must never be staged. It
keeps the first chunk's results: a state of one chunk is converted once. The second converts
and stages a chunk at a time; ``entries`` is the merged view (this epoch's writes included),
which must not be written while it is iterated, so each chunk is taken from its own iterator,
released before the chunk is staged, and the next starts just after the chunk's last key (the
rewrites staged up to it do not change what follows). Conversions are functions of the stored
bytes, so the second pass converts what the first did; should one fail there all the same (a
conversion hook that is not deterministic), the error is a ``StateMigrationAbortedError``,
which no caller catches: the task fails and the epoch is never committed.

Which entries hold values depends on the kind (see :mod:`.keys`): the base entry for
value, reducing and aggregating state; for list state the entries with an 8-byte
sequence suffix (the base entry is the sequence counter, not a value); for map state
every entry (the suffix is the map key, which never changes: key type changes are
incompatible).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from ..keys import keyed as K
from ..keys.system import keyed_record_key, name_of_record_key, record_range
from ..engine.store import VersionedStore
from ..ttl import codec as ttl_codec
from ..arrow_chunks import resumable_chunks
from ..ttl.kv import is_stamped
from .compatibility import Rewrite, equivalent, judge
from .errors import StateMigrationAbortedError, StateSchemaConflictError, StateSchemaIncompatibleError
from .schema import SINGLE_VALUE_KINDS, StateSchema, schema_of

if TYPE_CHECKING:
    from .descriptors import StateDescriptor

_LOG = logging.getLogger(__name__)

#: ``entries(start)``: the state's stored ``(key, raw value)`` pairs with ``key >= start`` (all for
#: None), ascending, this epoch's writes included.
Entries = Callable[[Optional[bytes]], Iterator[tuple[bytes, bytes]]]

#: Values a schema migration converts and stages at a time: what it holds in memory.
MIGRATION_CHUNK = 65_536


def restore_keyed_schema(store: VersionedStore, descriptor: "StateDescriptor", entries: Entries) -> int:
    """Check ``descriptor`` against its state's record, migrate if the verdict says so,
    and stage the record (see the module docstring). ``entries`` yields the state's stored
    ``(key, raw value)`` pairs. Returns how many values were rewritten.

    :raises StateSchemaIncompatibleError: the stored state cannot be read as declared.
    """
    name = descriptor.name
    record_key = keyed_record_key(descriptor.name_bytes)
    new = schema_of(descriptor)
    raw = store.get(record_key)
    if raw is None:
        _LOG.info("state %r: no schema record (a new state, or written by an earlier release); "
                  "recording %s", name, new.describe())
        store.put(record_key, new.encode())
        return 0
    old = StateSchema.decode(raw, name)
    if old == new:
        return 0
    verdict = judge(old, new, descriptor.serializer)
    if verdict.incompatible:
        raise StateSchemaIncompatibleError(name, old.describe(), new.describe(), verdict.reason)
    rewritten = 0
    if verdict.migrates:
        assert verdict.rewrite is not None
        stamped = is_stamped(store, descriptor.name_bytes)
        rewritten = _migrate_values(store, name, old, new, entries, verdict.rewrite, stamped)
        _LOG.info("state %r: migrated from %s to %s; %d stored values rewritten (durable at the next commit)",
                  name, old.describe(), new.describe(), rewritten)
    store.put(record_key, new.encode())
    return rewritten


def _is_value(kind: str, suffix: bytes) -> bool:
    if kind in SINGLE_VALUE_KINDS:
        return not suffix
    if kind == "list":
        return len(suffix) == K.SEQ_BYTES
    return True  # map: every entry is a map entry


def _migrate_values(store: VersionedStore, name: str, old: StateSchema, new: StateSchema, entries: Entries,
                    rewrite: Rewrite, stamped: bool, chunk: int = 0) -> int:
    """Stage every value entry rewritten, all or nothing, ``chunk`` (default
    :data:`MIGRATION_CHUNK`) values at a time (two passes: see the module docstring); returns
    how many were rewritten."""
    chunk = chunk or MIGRATION_CHUNK
    head = ttl_codec.STAMP_BYTES if stamped else 0

    def convert(raw: bytes) -> bytes:
        try:
            return raw[:head] + rewrite(raw[head:])
        except Exception as exc:
            raise StateSchemaIncompatibleError(
                name, old.describe(), new.describe(),
                f"a stored value could not be migrated ({type(exc).__name__}: {exc})") from exc

    # Pass 1: check every value, staging nothing (one iterator: nothing is written meanwhile).
    first: list[tuple[bytes, bytes]] = []
    total = 0
    for key, raw in _values(old.kind, entries(None)):
        converted = convert(raw)
        total += 1
        if len(first) < chunk:
            first.append((key, converted))
    # Pass 2: stage, the first chunk as converted above, then a chunk per iterator.
    if first:
        store.put_many([k for k, _ in first], [v for _, v in first])
    if len(first) < chunk:
        return total

    def convert_again(raw: bytes) -> bytes:
        try:
            return convert(raw)
        except StateSchemaIncompatibleError as exc:
            raise StateMigrationAbortedError(
                f"state {name!r}: a stored value that converted when the migration from {old.describe()} "
                f"to {new.describe()} was checked failed when converted again ({exc.reason}); part of the "
                "migration is staged, so this epoch fails. Make the conversion deterministic") from exc

    after_first = first[-1][0] + b"\x00"  # the least key above the first chunk's last
    for rows in resumable_chunks(lambda start: _values(old.kind, entries(start)), chunk, after_first):
        store.put_many([k for k, _ in rows], [convert_again(raw) for _, raw in rows])
    return total


def _values(kind: str, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """The value entries of ``entries`` (see the module docstring); closing it closes ``entries``."""
    try:
        for key, raw in entries:
            if _is_value(kind, K.split_entry(key)[3]):
                yield key, raw
    finally:
        close = getattr(entries, "close", None)
        if close is not None:
            close()


def merge_schema_records(source: VersionedStore, target: VersionedStore, tag: bytes,
                         keep: Optional[Callable[[str], bool]] = None) -> None:
    """Stage ``source``'s schema records (keyed or operator, by ``tag``) into ``target``,
    which a rescale fills from several sources; ``keep(kind)`` may skip records. A record
    already staged from another source must be :func:`~.compatibility.equivalent`; the
    first one stays.

    :raises StateSchemaConflictError: two sources stored the state in different layouts.
    """
    for key, raw in source.iterate(*record_range(tag)):
        name = name_of_record_key(key).decode("utf-8", "replace")
        if keep is not None and not keep(StateSchema.decode(raw, name).kind):
            continue
        existing = target.get(key)
        if existing is None:
            target.put(key, raw)
            continue
        if existing == raw:
            continue
        kept, other = StateSchema.decode(existing, name), StateSchema.decode(raw, name)
        if not equivalent(kept, other):
            raise StateSchemaConflictError(name, kept.describe(), other.describe())
