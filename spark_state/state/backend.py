"""The keyed state backend: hands out state objects and scopes them to the current key.

One backend wraps one loaded :class:`~spark_state.engine.store.VersionedStore` (one partition of
one operator). The current key lives in the backend's :class:`~.key_context.KeyContext`: the
runtime sets it (:meth:`KeyedStateBackend.set_current_key`, or the context's own method)
before each element; state objects created by ``get_*_state`` are registered with the
context and act on its key. Before committing, the runtime calls :meth:`before_commit`, which
writes pending write-back updates and runs TTL cleanup (see :mod:`spark_state.ttl.config`
for the strategies).

Schema evolution: registering a state (``get_*_state``) first checks its descriptor against
the schema record stored with the state, and migrates or refuses before anything else
happens (see :mod:`.evolution`).

TTL and restarts: a state's TTL does not decide compatibility (only last-access stamps
matter), so a restart with a different TTL value simply applies it. Turning TTL on or off for
an existing state rewrites that state's entries once (stamping them with "now", or
stripping the stamps); see :func:`spark_state.ttl.kv.migrate_layout`.
"""

from __future__ import annotations

import logging
from typing import Iterator, Optional, Union

from ..keys import keyed as K
from ..keys.keygroup_prefix import KEY_GROUP_KEYSPACE_END
from ..engine.store import VersionedStore
from ..ttl.kv import TtlStats, is_stamped, migrate_layout
from .access import PlainAccess, TtlAccess
from .compatibility import equivalent
from .descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .evolution import restore_keyed_schema
from .key_context import KeyContext
from .keyed_states import AggregatingState, KeyedState, ListState, MapState, ReducingState, ValueState
from .schema import schema_of

_LOG = logging.getLogger(__name__)

_STATE_CLASSES: dict[type, type] = {
    ValueStateDescriptor: ValueState,
    ListStateDescriptor: ListState,
    MapStateDescriptor: MapState,
    ReducingStateDescriptor: ReducingState,
    AggregatingStateDescriptor: AggregatingState,
}


class KeyedStateBackend:
    """Keyed state of one partition, on one loaded store."""

    def __init__(self, store: VersionedStore, *, write_back: bool = False,
                 key_context: Optional[KeyContext] = None) -> None:
        """``write_back``: value states may hold a key's last update until the key changes
        (:class:`~.keyed_states.ValueState`); whoever commits must call :meth:`before_commit`
        (or :meth:`flush`) first, as the process runtimes do. ``key_context``: the context to
        register states with (default: a new one with this ``write_back``)."""
        self._store = store
        self.key_context = key_context if key_context is not None else KeyContext(write_back=write_back)
        self._states: dict[str, KeyedState] = {}
        self._accesses: list[Union[PlainAccess, TtlAccess]] = []
        self.ttl_stats = TtlStats()

    @property
    def store(self) -> VersionedStore:
        return self._store

    @property
    def write_back(self) -> bool:
        return self.key_context.write_back.enabled

    # ------------------------------------------------------------------ current key
    @property
    def current_key(self) -> bytes:
        return self.key_context.key

    @property
    def current_key_group(self) -> int:
        return self.key_context.key_group

    def flush(self) -> None:
        """Write the pending write-back updates to the store."""
        self.key_context.write_back.flush()

    def set_current_key(self, key: bytes, key_group: int) -> None:
        """Scope every state object to ``key`` (serialized) in ``key_group``
        (:meth:`.KeyContext.set_current_key`)."""
        self.key_context.set_current_key(key, key_group)

    # ------------------------------------------------------------------ state objects
    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        return self._get(descriptor, ValueStateDescriptor)  # type: ignore[return-value]

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        return self._get(descriptor, ListStateDescriptor)  # type: ignore[return-value]

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        return self._get(descriptor, MapStateDescriptor)  # type: ignore[return-value]

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        return self._get(descriptor, ReducingStateDescriptor)  # type: ignore[return-value]

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        return self._get(descriptor, AggregatingStateDescriptor)  # type: ignore[return-value]

    def _get(self, descriptor: StateDescriptor, expected: type) -> KeyedState:
        if not isinstance(descriptor, expected):
            raise TypeError(f"expected a {expected.__name__}, got {descriptor!r}")
        existing = self._states.get(descriptor.name)
        if existing is not None:
            if type(existing.descriptor) is not type(descriptor):
                raise ValueError(
                    f"state {descriptor.name!r} is already registered as {existing.descriptor.kind} "
                    f"state; a {descriptor.kind} state needs another name")
            registered, declared = schema_of(existing.descriptor), schema_of(descriptor)
            if registered != declared and not equivalent(registered, declared):
                # the first declaration would win silently, and the second's type never be checked
                raise ValueError(
                    f"state {descriptor.name!r} is already registered as {registered.describe()}; declared again "
                    f"as {declared.describe()}: one name holds one type (give the other state another name)")
            return existing
        self.flush()  # registration may scan the store (schema checks, TTL layout migration)
        restore_keyed_schema(self._store, descriptor, lambda start: self._entries_of(descriptor.name_bytes, start))
        access = self._access_for(descriptor)
        state = _STATE_CLASSES[type(descriptor)](self.key_context, descriptor, access)
        self._states[descriptor.name] = state
        self.key_context.register(state)
        self._accesses.append(access)
        return state

    def _access_for(self, descriptor: StateDescriptor) -> Union[PlainAccess, TtlAccess]:
        ns = descriptor.name_bytes
        want_stamped = descriptor.ttl is not None
        if is_stamped(self._store, ns) != want_stamped:
            now = descriptor.ttl.now_ms() if descriptor.ttl else 0
            rewritten = migrate_layout(self._store, ns, want_stamped, lambda start: self._entries_of(ns, start), now,
                                       descriptor.ttl.ttl_ms if descriptor.ttl else None)
            _LOG.info("state %r: TTL turned %s; %d existing entries rewritten (durable at the next commit)",
                      descriptor.name, "on" if want_stamped else "off", rewritten)
        if descriptor.ttl is None:
            return PlainAccess(self._store)
        return TtlAccess(self._store, ns, descriptor.ttl, self.ttl_stats)

    def _entries_of(self, name_bytes: bytes, start: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        """Every stored entry of one state from ``start`` on, across key groups, this epoch's
        writes included (a full scan; migration only). Only the key-group keyspace (first byte
        below 0x80) is scanned: operator state of a keyed function (0xFE) and system keys (0xFF)
        are laid out differently."""
        for key, value in self._store.iterate(start, KEY_GROUP_KEYSPACE_END):
            if K.state_name_of(key) == name_bytes:
                yield key, value

    # ------------------------------------------------------------------ lifecycle
    def before_commit(self) -> int:
        """Write pending write-back updates, then run TTL cleanup for this epoch; returns
        how many entries expired by it."""
        self.flush()
        snapshots = self._store.commit_takes_snapshot() if self._accesses else False
        return sum(access.before_commit(snapshots) for access in self._accesses)

    def collect_expired_in_background(self) -> None:
        """Background cleanup: look up expired entries now (e.g. while idle); they are
        removed at the next :meth:`before_commit`."""
        for access in self._accesses:
            access.collect_background()

    def state_names(self) -> list[str]:
        return list(self._states)
