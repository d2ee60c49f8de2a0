"""Operator (non-keyed) state: Flink's list, union list and broadcast state, per partition.

State objects live in memory while a task runs. They are read from the partition's store
when the function registers them (in ``initialize_state``) and written back after
``snapshot_state``, right before the commit. Operator state is meant to be small (offsets,
buffers, rules), as in Flink. Each value is serialized once when it is given (``add``,
``put``), so that one that does not fit the descriptor's type fails that call with
:class:`~spark_state.state.errors.StateValueError` naming the state, rather than the write-back
at the end of the task.

Store layout (:mod:`spark_state.keys.operator`; values are the descriptor serializer's
bytes): ``[keyspace][mode u8][len(name) u8][name][index u32 BE]`` per list element (mode 1 =
list, even-split; 2 = union list) and ``[keyspace][mode u8][len(name) u8][name][map key]`` per
broadcast entry (mode 3). In the store of a *keyed* function (``KeyedProcessFunction`` with
``initialize_state``, or the broadcast state of ``keyed_broadcast_process``) the keyspace is
:data:`KEYED_OPERATOR_PREFIX` (``0xFE``), apart from keyed state and the system keyspace;
``checkpointed_process`` stores have no keyed state and keep the plain layout (prefix ``b""``).

Redistribution when the parallelism changes from ``m`` to ``n`` (Flink's
``RoundRobinOperatorStateRepartitioner``), on raw bytes, without deserializing:

* list (even-split): per state (names in sorted order), all elements of old partitions
  ``0..m-1`` concatenated; ``base, rem = divmod(total, n)``; new partitions, starting at a
  rotating offset, take consecutive chunks of ``base`` elements, the first ``rem`` of them
  one more; the next state starts where the short chunks began.
* union: every new partition gets all elements of all old partitions.
* broadcast: new partition ``i`` gets old partition ``i % m``'s map.

At an unchanged parallelism every partition gets back exactly what it snapshotted (a
Flink operator between two checkpoints), so retries and restarts see the same state.

Schema records (:mod:`spark_state.state.schema`, ``[0xFF][0x04][len(name)][name]``) say
what each state's bytes are. Registration checks the descriptor against the record
before ``initialize_state`` returns: an incompatible change raises, a migration converts
each stored element (or map value) as it is read, and the write-back at the end of the
batch stores the converted values and the new record in the same commit. On rescale the
records go with the state: a broadcast state's from the old partition it is copied from,
a list state's from every old partition, which must agree.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from ..keys.operator import (
    INDEX,
    KEYED_OPERATOR_PREFIX,
    MODE_BROADCAST,
    MODE_KINDS,
    MODE_SPLIT,
    MODE_UNION,
    modes_range,
    split_key,
    state_prefix,
)
from ..keys.system import OPERATOR_SCHEMA_TAG, operator_record_key
from ..state import MapStateDescriptor, ListStateDescriptor
from ..state.compatibility import judge
from ..state.descriptors import StateDescriptor
from ..state.errors import StateDecodeError, StateSchemaIncompatibleError, StateValueError
from ..state.evolution import merge_schema_records
from ..state.schema import StateSchema, schema_of
from ..engine.store import VersionedStore, prefix_upper_bound

__all__ = ["KEYED_OPERATOR_PREFIX", "SPLIT", "UNION", "BROADCAST", "MODE_NAMES", "OperatorListState", "BroadcastState",
           "OperatorStateStore", "stored_states", "split_ranges", "redistribute"]

SPLIT, UNION, BROADCAST = MODE_SPLIT, MODE_UNION, MODE_BROADCAST
MODE_NAMES = {SPLIT: "list", UNION: "union list", BROADCAST: "broadcast"}
_pack_index = INDEX.pack


def _scan(store: VersionedStore, prefix: bytes) -> list[tuple[bytes, bytes]]:
    return list(store.iterate(prefix, prefix_upper_bound(prefix)))


def stored_states(store: VersionedStore, keyspace: bytes = b"") -> dict[tuple[int, bytes], list[tuple[bytes, bytes]]]:
    """Every operator state in ``store`` (under ``keyspace``): (mode, name bytes) ->
    [(entry suffix, value)] in key order."""
    out: dict[tuple[int, bytes], list[tuple[bytes, bytes]]] = {}
    for key, value in store.iterate(*modes_range(keyspace)):
        mode, name, suffix = split_key(key, keyspace)
        out.setdefault((mode, name), []).append((suffix, value))
    return out


# ---------------------------------------------------------------------------- state objects
class OperatorListState:
    """Flink's operator ``ListState`` (even-split or union): a list per partition."""

    def __init__(self, mode: int, descriptor: ListStateDescriptor, elements: list[Any]) -> None:
        self.mode = mode
        self.descriptor = descriptor
        self._elements = elements

    @property
    def name(self) -> str:
        return self.descriptor.name

    def get(self) -> list[Any]:
        """A copy of the elements."""
        return list(self._elements)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._elements))

    def __len__(self) -> int:
        return len(self._elements)

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"operator list state {self.name!r} cannot hold None")
        _check(self.descriptor.serializer, value, self, "given to add()")
        self._elements.append(value)

    def add_all(self, values) -> None:
        for v in values:
            self.add(v)

    def update(self, values) -> None:
        self._elements = []
        self.add_all(values)

    def clear(self) -> None:
        self._elements = []

    def _entries(self) -> list[tuple[bytes, bytes]]:
        ser = self.descriptor.serializer.serialize
        return [(_pack_index(i), ser(v)) for i, v in enumerate(self._elements)]


class BroadcastState:
    """Flink's ``BroadcastState``: a map that every partition holds a copy of."""

    mode = BROADCAST

    def __init__(self, descriptor: MapStateDescriptor, entries: dict) -> None:
        self.descriptor = descriptor
        self._map = entries

    @property
    def name(self) -> str:
        return self.descriptor.name

    def get(self, key: Any) -> Any:
        return self._map.get(key)

    def put(self, key: Any, value: Any) -> None:
        """Set the entry of ``key``; ``None`` removes it. A key or value that does not fit the
        descriptor's types raises :class:`~spark_state.state.errors.StateValueError` here."""
        if value is None:
            self._map.pop(key, None)
            return
        _check(self.descriptor.key_serializer, key, self, "given to put()", "key", self.descriptor.declared_key_type)
        _check(self.descriptor.serializer, value, self, "given to put()")
        self._map[key] = value

    def put_all(self, entries: dict) -> None:
        for k, v in entries.items():
            self.put(k, v)

    def remove(self, key: Any) -> None:
        self._map.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._map

    __contains__ = contains

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map.items())

    def keys(self) -> list[Any]:
        return list(self._map)

    def values(self) -> list[Any]:
        return list(self._map.values())

    def is_empty(self) -> bool:
        return not self._map

    def clear(self) -> None:
        self._map = {}

    def _entries(self) -> list[tuple[bytes, bytes]]:
        ks, vs = self.descriptor.key_serializer.serialize, self.descriptor.serializer.serialize
        return sorted((ks(k), vs(v)) for k, v in self._map.items())


def _check(serializer: Any, value: Any, state: "OperatorListState | BroadcastState", origin: str,
           what: str = "value", declared: Optional[str] = None) -> None:
    """Serialize ``value`` (and drop the bytes: operator state is small, its values are written
    at the flush), raising :class:`StateValueError` naming the state if it does not fit."""
    try:
        serializer.serialize(value)
    except Exception as exc:
        raise StateValueError(state.name, MODE_NAMES[state.mode], declared or state.descriptor.declared_type,
                              origin, value, exc, what) from exc


def _check_held(state: "OperatorListState | BroadcastState") -> None:
    """Raise :class:`StateValueError` for the first value ``state`` holds that does not fit
    (one changed in place after it was given)."""
    origin = "held at the end of the batch: changed in place after it was given?"
    if isinstance(state, BroadcastState):
        for key, value in state.items():
            _check(state.descriptor.key_serializer, key, state, origin, "key", state.descriptor.declared_key_type)
            _check(state.descriptor.serializer, value, state, origin)
    else:
        for value in state.get():
            _check(state.descriptor.serializer, value, state, origin)


class OperatorStateStore:
    """The operator states of one partition for one task: registration reads, flush writes."""

    def __init__(self, store: VersionedStore, keyspace: bytes = b"") -> None:
        self._store = store
        self._keyspace = keyspace
        self._states: dict[str, Any] = {}

    def _register(self, mode: int, descriptor: StateDescriptor, expected: type) -> Any:
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {descriptor!r}")
        existing = self._states.get(descriptor.name)
        if existing is not None:
            if existing.mode != mode:
                raise ValueError(
                    f"operator state {descriptor.name!r} is already registered as "
                    f"{MODE_NAMES[existing.mode]} state")
            return existing
        old, rewrite = self._check_schema(mode, descriptor)
        entries = _scan(self._store, state_prefix(mode, descriptor.name_bytes, self._keyspace))
        if rewrite is not None:
            entries = _migrated(descriptor, old, mode, entries, rewrite)
        try:
            if mode == BROADCAST:
                assert isinstance(descriptor, MapStateDescriptor)  # get_broadcast_state takes only these
                n = len(state_prefix(mode, descriptor.name_bytes, self._keyspace))
                dk, dv = descriptor.key_serializer.deserialize, descriptor.serializer.deserialize
                state: Any = BroadcastState(descriptor, {dk(k[n:]): dv(v) for k, v in entries})
            else:
                assert isinstance(descriptor, ListStateDescriptor)  # get_(union_)list_state take only these
                de = descriptor.serializer.deserialize
                state = OperatorListState(mode, descriptor, [de(v) for _, v in entries])
        except Exception as exc:
            raise StateDecodeError(descriptor.name, repr(descriptor.serializer), exc) from exc
        self._states[descriptor.name] = state
        return state

    def _check_schema(self, mode: int, descriptor: StateDescriptor
                      ) -> tuple[Optional[StateSchema], Optional[Callable[[bytes], bytes]]]:
        """Judge ``descriptor`` against the stored record and stage the new record; returns
        the old record and, if the state migrates, the rewrite of each stored value.
        The converted values are written back by :meth:`flush`, in the same epoch."""
        store = self._store
        record_key = operator_record_key(descriptor.name_bytes)
        new = schema_of(descriptor, MODE_KINDS[mode])
        raw = store.get(record_key)
        if raw is None:
            # A new state, or one written by a release without records: the mode can still
            # be told from the data keys.
            for other in (SPLIT, UNION, BROADCAST):
                if other != mode and _scan(store, state_prefix(other, descriptor.name_bytes, self._keyspace))[:1]:
                    raise StateSchemaIncompatibleError(
                        descriptor.name, f"{MODE_NAMES[other]} state", f"{MODE_NAMES[mode]} state",
                        "operator state modes redistribute differently on rescale, so a mode never changes")
            store.put(record_key, new.encode())
            return None, None
        old = StateSchema.decode(raw, descriptor.name)
        if old == new:
            return old, None
        verdict = judge(old, new, descriptor.serializer)
        if verdict.incompatible:
            raise StateSchemaIncompatibleError(descriptor.name, old.describe(), new.describe(), verdict.reason)
        store.put(record_key, new.encode())
        return old, verdict.rewrite

    def get_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        return self._register(SPLIT, descriptor, ListStateDescriptor)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        return self._register(UNION, descriptor, ListStateDescriptor)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        return self._register(BROADCAST, descriptor, MapStateDescriptor)

    def registered_names(self) -> list[str]:
        return list(self._states)

    def flush(self) -> None:
        """Stage every registered state's current content (replacing what was stored)."""
        store = self._store
        for state in self._states.values():
            prefix = state_prefix(state.mode, state.descriptor.name_bytes, self._keyspace)
            try:  # values were checked when given; one changed in place since may still not fit
                entries = state._entries()
            except Exception:
                _check_held(state)
                raise
            store.delete_many([k for k, _ in _scan(store, prefix)])
            store.put_many([prefix + k for k, _ in entries], [v for _, v in entries])


def _migrated(descriptor: StateDescriptor, old: Optional[StateSchema], mode: int,
              entries: list[tuple[bytes, bytes]], rewrite: Callable[[bytes], bytes]) -> list[tuple[bytes, bytes]]:
    """``entries`` with every value rewritten to the new schema (keys stay)."""
    out = []
    for key, value in entries:
        try:
            out.append((key, rewrite(value)))
        except Exception as exc:
            assert old is not None
            raise StateSchemaIncompatibleError(
                descriptor.name, old.describe(), schema_of(descriptor, MODE_KINDS[mode]).describe(),
                f"a stored value could not be migrated ({type(exc).__name__}: {exc})") from exc
    return out


# ---------------------------------------------------------------------------- redistribution
def split_ranges(total: int, parallelism: int, start: int) -> tuple[list[tuple[int, int]], int]:
    """Flink's even-split assignment: ``ranges[i] = (lo, hi)`` of the concatenated elements
    for new partition ``i``, and the start offset for the next state."""
    base, rem = divmod(total, parallelism)
    ranges: list[tuple[int, int]] = [(0, 0)] * parallelism
    new_start = start
    pos = 0
    for k in range(parallelism):
        op = (k + start) % parallelism
        count = base
        if rem > 0:
            count += 1
            rem -= 1
        elif rem == 0:
            new_start = op
            rem -= 1
        ranges[op] = (pos, pos + count)
        pos += count
    return ranges, new_start


def redistribute(target: VersionedStore, partition: int, parallelism: int,
                 old_stores: dict[int, VersionedStore], keyspace: bytes = b"") -> None:
    """Stage partition ``partition``'s share of the old partitions' operator state into
    ``target`` (see the module docstring); ``old_stores`` must hold every old partition.
    ``keyspace`` is :data:`KEYED_OPERATOR_PREFIX` in a keyed function's store."""
    old_parallelism = len(old_stores)
    per_old = {j: stored_states(old_stores[j], keyspace) for j in sorted(old_stores)}
    names: set[tuple[int, bytes]] = set()
    for states in per_old.values():
        names.update(states)
    # Records: a broadcast state's from the old partition it is copied from, the others'
    # from every old partition (which must agree in layout).
    for j in sorted(old_stores):
        def keep(kind: str, j: int = j) -> bool:
            return kind != "broadcast" or j == partition % old_parallelism

        merge_schema_records(old_stores[j], target, OPERATOR_SCHEMA_TAG, keep=keep)
    keys: list[bytes] = []
    values: list[bytes] = []
    start = 0
    for mode, name in sorted(names, key=lambda mn: (mn[1], mn[0])):
        prefix = state_prefix(mode, name, keyspace)
        if mode == BROADCAST:
            for suffix, value in per_old[partition % old_parallelism].get((mode, name), []):
                keys.append(prefix + suffix)
                values.append(value)
            continue
        elements = [v for j in sorted(per_old) for _, v in per_old[j].get((mode, name), [])]
        if mode == SPLIT:
            ranges, start = split_ranges(len(elements), parallelism, start)
            lo, hi = ranges[partition]
            elements = elements[lo:hi]
        for i, value in enumerate(elements):
            keys.append(prefix + _pack_index(i))
            values.append(value)
    target.put_many(keys, values)

