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

Which entries hold values depends on the kind (see :mod:`.keys`): the base entry for
value, reducing and aggregating state; for list state the entries with an 8-byte
sequence suffix (the base entry is the sequence counter, not a value); for map state
every entry (the suffix is the map key, which never changes: key type changes are
incompatible).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ..keys import keyed as K
from ..keys.system import keyed_record_key, name_of_record_key, record_range
from ..engine.store import VersionedStore
from ..ttl import codec as ttl_codec
from ..ttl.kv import is_stamped
from .compatibility import Rewrite, equivalent, judge
from .errors import StateSchemaConflictError, StateSchemaIncompatibleError
from .schema import SINGLE_VALUE_KINDS, StateSchema, schema_of

if TYPE_CHECKING:
    from .descriptors import StateDescriptor

_LOG = logging.getLogger(__name__)

Entries = Callable[[], Iterable[tuple[bytes, bytes]]]


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
        keys, values = _rewrite_values(name, old, new, entries(), verdict.rewrite, stamped)
        store.put_many(keys, values)
        rewritten = len(keys)
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


def _rewrite_values(name: str, old: StateSchema, new: StateSchema, entries: Iterable[tuple[bytes, bytes]],
                    rewrite: Rewrite, stamped: bool) -> tuple[list[bytes], list[bytes]]:
    """Every value entry rewritten; all or nothing (converted before anything is staged)."""
    keys: list[bytes] = []
    values: list[bytes] = []
    head = ttl_codec.STAMP_BYTES if stamped else 0
    for key, raw in entries:
        if not _is_value(old.kind, K.split_entry(key)[3]):
            continue
        try:
            converted = rewrite(raw[head:])
        except Exception as exc:
            raise StateSchemaIncompatibleError(
                name, old.describe(), new.describe(),
                f"a stored value could not be migrated ({type(exc).__name__}: {exc})") from exc
        keys.append(key)
        values.append(raw[:head] + converted)
    return keys, values


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
