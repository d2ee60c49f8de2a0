"""The current key of one partition's keyed state (Flink's ``InternalKeyContext``).

The runtime sets the current key (:meth:`KeyContext.set_current_key`) before each key group
of rows and before each firing timer; keyed state objects (:mod:`.keyed_states`) and the
timer service (:mod:`spark_state.process.timer_service`) read it. Neither reaches into the
backend (:mod:`.backend`), which only creates state objects and registers them here.

Encoded parts, kept with the key so that no access re-encodes them (layout: :mod:`.keys`)::

    key_group_bytes = [key group : uint16 BE]          (keys.key_group_bytes)
    key_part        = [len(key) : uint32 BE][key bytes] (keys.key_part)

Invariants:

* every registered :class:`KeyScoped` object's ``_key`` is
  ``key_group_bytes + object._name + key_part`` of the current key -- the base key of its
  entries, computed once per key switch rather than once per access;
* a :class:`WriteBack` queue holds the value states whose last update for the current key is
  not in the store yet; it is emptied (the updates written) before the key changes and before
  a commit, so the store never misses an update of a key other than the current one.
"""

from __future__ import annotations

from typing import Protocol

from ..keys import keyed as K

_pack_key_length = K.KEY_LENGTH.pack


class KeyScoped(Protocol):
    """A state object whose entries hang under the current key: ``_name`` is its name part
    (``keys.name_part``), ``_key`` the base key that :class:`KeyContext` maintains."""

    _name: bytes
    _key: bytes


class Flushable(Protocol):
    def _flush(self) -> None:
        """Write the held update (if any) to the store."""


class WriteBack:
    """Value states holding the current key's last update, to be written at the next key
    switch or commit (see :class:`~.keyed_states.ValueState`). ``enabled`` is False where
    nobody guarantees the flush before a commit (states then write through)."""

    __slots__ = ("enabled", "pending")

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        #: states with an update not yet in the store, each once (a state marks itself dirty)
        self.pending: list[Flushable] = []

    def flush(self) -> None:
        """Write every pending update to the store."""
        pending, self.pending = self.pending, []
        for state in pending:
            state._flush()


class KeyContext:
    """The current key (serialized), its key group and their encoded parts; the write-back
    queue; the state objects scoped to the key (see the module docstring)."""

    __slots__ = ("key", "key_group", "key_group_bytes", "key_part", "write_back", "_scoped")

    def __init__(self, *, write_back: bool = False) -> None:
        #: the current key's bytes (the encoding of :mod:`spark_state.process.keycodec`)
        self.key: bytes = b""
        self.key_group = 0
        self.key_group_bytes = K.key_group_bytes(0)
        self.key_part = K.key_part(b"")
        self.write_back = WriteBack(write_back)
        self._scoped: list[KeyScoped] = []

    def register(self, state: KeyScoped) -> None:
        """Keep ``state._key`` on the current key from now on (it is set now)."""
        state._key = self.key_group_bytes + state._name + self.key_part
        self._scoped.append(state)

    def set_current_key(self, key: bytes, key_group: int) -> None:
        """Scope every registered state to ``key`` in ``key_group`` (each gets its base key
        now: once per key, not once per access). Pending write-back updates of the previous
        key are written first."""
        write_back = self.write_back
        if write_back.pending:
            write_back.flush()
        self.key = key
        self.key_part = part = _pack_key_length(len(key)) + key  # K.key_part, inlined: once per key
        if key_group != self.key_group:
            self.key_group_bytes = K.key_group_bytes(key_group)
            self.key_group = key_group
        kg = self.key_group_bytes
        for state in self._scoped:
            state._key = kg + state._name + part
