"""The keyed state types (Flink's ``ValueState``, ``ListState``, ``MapState``,
``ReducingState``, ``AggregatingState``), each scoped to the current key of a
:class:`~.key_context.KeyContext`.

A state object is created once (usually in ``open``) and follows the current key that the
runtime sets before each element; every method acts on that key's state only. The key
context hands every state object its base key (``_key``) when the current key changes, so an
access pays no key concatenation. A :class:`ValueState` without TTL whose serializer promises exact
round trips (``exact_type``: int, float, str, bytes, bool) remembers the value it last read
or wrote for the current key, so the read-modify-write of a running count reads the store
once per key and batch, not once per row; with the context's write-back queue enabled (the
process runtimes) its writes also reach the store once per key switch (see :class:`ValueState`). A
:class:`ListState` without TTL does the same with its list's counter: a run of adds to one key
reads it once and, with write-back, writes it once. Writes are staged in the store's pending
epoch and become durable at the next commit.
Key layout: :mod:`spark_state.keys.keyed`.

A stored value that does not decode raises :class:`~.errors.StateDecodeError`, naming the
state (not a bare ``struct.error``); a value that does not fit the declared type raises
:class:`~.errors.StateValueError` from the call that was given it (``update``, ``add``,
``put``), naming the state, its declared type and the value, before anything is stored. Every
value is serialized by that call already (or, on the write-back path, is of the serializer's
exact type and range), so the check costs nothing more: the ``try`` blocks cost nothing when
nothing fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from ..keys import keyed as K
from .errors import StateDecodeError, StateValueError
from .descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)

if TYPE_CHECKING:
    from .access import PlainAccess, TtlAccess
    from .key_context import KeyContext


class KeyedState:
    """Common part: the descriptor, the access path, and the current key's base key."""

    def __init__(self, context: "KeyContext", descriptor: StateDescriptor,
                 access: "PlainAccess | TtlAccess") -> None:
        self.descriptor = descriptor
        self._access = access
        self._name = K.name_part(descriptor.name_bytes)
        self._ser = descriptor.serializer
        #: the current key's base key, kept by the key context once registered (KeyContext.register)
        self._key = context.key_group_bytes + self._name + context.key_part

    @property
    def name(self) -> str:
        return self.descriptor.name

    def _base(self) -> bytes:
        return self._key

    def clear(self) -> None:
        """Remove the current key's state."""
        self._access.delete(self._key)

    def _decode(self, raw: bytes) -> Any:
        try:
            return self._ser.deserialize(raw)
        except Exception as exc:
            raise self._undecodable(exc) from exc

    def _undecodable(self, exc: BaseException) -> StateDecodeError:
        return StateDecodeError(self.name, repr(self._ser), exc)

    def _unfit(self, value: Any, exc: BaseException, origin: str, what: str = "value",
               declared: Optional[str] = None) -> StateValueError:
        """The error for ``value`` that the serializer refused (``exc``); ``origin`` says where
        it came from (``given to update()``)."""
        d = self.descriptor
        return StateValueError(self.name, d.kind, declared or d.declared_type, origin, value, exc, what)

    def _encode(self, value: Any, call: str) -> bytes:
        """``value`` serialized, or :class:`StateValueError` naming ``call`` (off the hot paths)."""
        try:
            return self._ser.serialize(value)
        except Exception as exc:
            raise self._unfit(value, exc, f"given to {call}") from exc


_ABSENT = object()
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class ValueState(KeyedState):
    """One value per key.

    Read cache (see the module docstring): ``_ckey`` is the base key whose value is known
    (compared by identity: the key context makes a new base key object for every key switch),
    ``_cval`` that value or ``_ABSENT``. Only values of the serializer's ``exact_type`` are
    kept, and only without TTL (a TTL read may expire or re-stamp the entry).

    Write-back (when the context's :class:`~.key_context.WriteBack` queue is enabled, as the
    process runtimes do): an update of such a value is serialized at once (so a bad value
    fails in ``update``) but its bytes reach the store when the queue is flushed -- at the
    next key switch or before the commit -- so a key's run of updates costs one store write.
    """

    descriptor: ValueStateDescriptor

    def __init__(self, context: "KeyContext", descriptor: StateDescriptor,
                 access: "PlainAccess | TtlAccess") -> None:
        super().__init__(context, descriptor, access)
        self._exact = getattr(self._ser, "exact_type", None) if access.ttl is None else None
        self._queue = context.write_back
        self._write_back = self._queue.enabled and self._exact is not None
        #: serialize write-back updates at once (text: encoding can fail); other exact types
        #: cannot fail once an int is known to fit int64, so they are serialized when written
        self._eager = self._exact is str
        self._get, self._put = access.get, access.put
        self._ckey: Optional[bytes] = None
        self._cval: Any = _ABSENT
        self._craw: Optional[bytes] = None
        self._dirty = False

    def value(self) -> Any:
        """The current key's value, or the descriptor's default if there is none."""
        key = self._key
        if key is self._ckey:
            v = self._cval
            return self.descriptor.default if v is _ABSENT else v
        raw = self._get(key)
        if raw is None:
            if self._exact is not None:
                self._ckey, self._cval = key, _ABSENT
            return self.descriptor.default
        try:  # inlined (not self._decode): the hottest read path
            v = self._ser.deserialize(raw)
        except Exception as exc:
            raise self._undecodable(exc) from exc
        if type(v) is self._exact:
            self._ckey, self._cval = key, v
        return v

    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it. A value that does not fit the declared type raises
        :class:`~.errors.StateValueError` here, and the state keeps its value."""
        if type(value) is self._exact:
            if self._write_back:
                if self._eager:
                    try:
                        self._craw = self._ser.serialize(value)  # text: a bad string fails here
                    except Exception as exc:
                        raise self._unfit(value, exc, "given to update()") from exc
                else:
                    if self._exact is int and not _I64_MIN <= value <= _I64_MAX:
                        self._encode(value, "update()")  # raises what a write-through update raises
                    self._craw = None  # serialized when written
                if not self._dirty:
                    self._dirty = True
                    self._queue.pending.append(self)
                self._ckey, self._cval = self._key, value
                return
            key = self._key
            try:
                raw = self._ser.serialize(value)
            except Exception as exc:
                raise self._unfit(value, exc, "given to update()") from exc
            self._put(key, raw)
            self._ckey, self._cval = key, value
            return
        if value is None:
            self.clear()
            return
        raw = self._encode(value, "update()")
        self._dirty = False  # a pending write of this key is superseded
        self._ckey = None
        self._put(self._key, raw)

    def clear(self) -> None:
        """Remove the current key's value."""
        self._dirty = False
        self._ckey = None
        self._access.delete(self._key)

    def _flush(self) -> None:
        """Write a pending (write-back) update to the store."""
        if self._dirty:
            self._dirty = False
            raw = self._craw
            assert self._ckey is not None  # an update sets the cached key with the value
            self._put(self._ckey, self._ser.serialize(self._cval) if raw is None else raw)


class ListState(KeyedState):
    """A list per key, one store entry per element (so every element has its own TTL).

    Layout: the entry at the base key holds the next sequence number (uint64 BE); element
    ``i`` lives at ``base + seq``. With TTL the counter is written with every add, so its TTL
    stamp is never older than any element's and it never expires before them.

    Counter cache (without TTL): ``_skey`` is the base key whose next sequence number ``_seq`` is
    known (compared by identity, as :class:`ValueState`'s read cache), so a run of adds to one
    key reads its counter once. With the context's write-back queue enabled (the process
    runtimes) the counter also reaches the store once, when the queue is flushed (at the next
    key switch or before the commit); the elements are written at once. Until then the
    counter in the store may be behind: nothing reads it but :meth:`_next_seq`, through the cache.
    """

    descriptor: ListStateDescriptor

    def __init__(self, context: "KeyContext", descriptor: StateDescriptor,
                 access: "PlainAccess | TtlAccess") -> None:
        super().__init__(context, descriptor, access)
        self._queue = context.write_back
        self._cached = access.ttl is None
        self._write_back = self._queue.enabled and self._cached
        self._skey: Optional[bytes] = None
        self._seq = 0
        self._dirty = False

    def get(self) -> list[Any]:
        """The elements, oldest first (``[]`` when empty)."""
        base = self._key
        n = len(base)
        de = self._ser.deserialize
        entries = self._access.scan(base)
        try:
            return [de(v) for k, v in entries if len(k) > n]
        except Exception as exc:
            raise self._undecodable(exc) from exc

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())

    def add(self, value: Any) -> None:
        """Append one element."""
        if value is None:
            raise ValueError(f"list state {self.name!r} cannot hold None elements")
        raw = self._encode(value, "add()")
        base = self._key
        seq = self._next_seq(base)
        self._access.put(base + K.seq_suffix(seq), raw)
        self._set_next_seq(base, seq + 1)

    def add_all(self, values: Iterable[Any]) -> None:
        """Append several elements (none if one of them does not fit the declared type)."""
        self._append(self._encode_all(values, "add_all()"))

    def update(self, values: Iterable[Any]) -> None:
        """Replace all elements (the list stays as it was if one of them does not fit)."""
        raws = self._encode_all(values, "update()")
        self.clear()
        self._append(raws)

    def _encode_all(self, values: Iterable[Any], call: str) -> list[bytes]:
        """Every element serialized, before any is stored."""
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"list state {self.name!r} cannot hold None elements")
        ser = self._ser.serialize
        try:
            return [ser(v) for v in values]
        except Exception:
            for v in values:  # find the element at fault, for the message
                self._encode(v, call)
            raise

    def _append(self, raws: list[bytes]) -> None:
        if not raws:
            return
        base = self._key
        seq = self._next_seq(base)
        put = self._access.put
        for raw in raws:
            put(base + K.seq_suffix(seq), raw)
            seq += 1
        self._set_next_seq(base, seq)

    def clear(self) -> None:
        base = self._key
        if base is self._skey:
            self._skey, self._dirty = None, False  # a pending counter write is superseded
        delete = self._access.delete
        for key, _ in self._access.raw_scan(base):
            delete(key)

    def _set_next_seq(self, base: bytes, seq: int) -> None:
        """Record ``seq`` as the next sequence number of the list at ``base`` (see the class docstring)."""
        if not self._write_back:
            self._access.put(base, K.seq_suffix(seq))
            if self._cached:
                self._skey, self._seq = base, seq
            return
        self._skey, self._seq = base, seq
        if not self._dirty:
            self._dirty = True
            self._queue.pending.append(self)

    def _flush(self) -> None:
        """Write a pending (write-back) counter to the store."""
        if self._dirty:
            self._dirty = False
            assert self._skey is not None  # set with the counter
            self._access.put(self._skey, K.seq_suffix(self._seq))

    def _next_seq(self, base: bytes) -> int:
        if base is self._skey:
            return self._seq
        raw = self._access.get(base)
        if raw is not None:
            return K.decode_seq(raw)
        # No counter (a new list, or its counter was cleaned up): continue after any
        # element still stored, expired or not, so no element is ever overwritten.
        n = len(base)
        last = -1
        for key, _ in self._access.raw_scan(base):
            if len(key) == n + K.SEQ_BYTES:
                last = max(last, K.decode_seq(key, n))
        return last + 1


class MapState(KeyedState):
    """A map per key, one store entry per map entry (each with its own TTL)."""

    descriptor: MapStateDescriptor

    def __init__(self, context: "KeyContext", descriptor: MapStateDescriptor,
                 access: "PlainAccess | TtlAccess") -> None:
        super().__init__(context, descriptor, access)
        self._kser = descriptor.key_serializer

    def get(self, key: Any) -> Any:
        try:
            k = self._kser.serialize(key)
        except Exception as exc:
            raise self._unfit_key(key, exc, "get()") from exc
        raw = self._access.get(self._key + k)
        return None if raw is None else self._decode(raw)

    def put(self, key: Any, value: Any) -> None:
        """Set the entry of ``key``; ``None`` removes it. A key or value that does not fit the
        declared types raises :class:`~.errors.StateValueError` here."""
        if value is None:
            self.remove(key)
            return
        try:
            k = self._kser.serialize(key)
        except Exception as exc:
            raise self._unfit_key(key, exc, "put()") from exc
        try:
            v = self._ser.serialize(value)
        except Exception as exc:
            raise self._unfit(value, exc, "given to put()") from exc
        self._access.put(self._key + k, v)

    def put_all(self, entries: dict) -> None:
        for key, value in entries.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        self._access.delete(self._key + self._map_key(key, "remove()"))

    def contains(self, key: Any) -> bool:
        return self._access.get(self._key + self._map_key(key, "contains()")) is not None

    def _map_key(self, key: Any, call: str) -> bytes:
        try:
            return self._kser.serialize(key)
        except Exception as exc:
            raise self._unfit_key(key, exc, call) from exc

    def _unfit_key(self, key: Any, exc: BaseException, call: str) -> StateValueError:
        return self._unfit(key, exc, f"given to {call}", "key", self.descriptor.declared_key_type)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def items(self) -> list[tuple[Any, Any]]:
        base = self._key
        n = len(base)
        dk, dv = self._kser.deserialize, self._ser.deserialize
        entries = self._access.scan(base)
        try:
            return [(dk(k[n:]), dv(v)) for k, v in entries]
        except Exception as exc:
            raise self._undecodable(exc) from exc

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self._access.scan(self._key)

    def clear(self) -> None:
        delete = self._access.delete
        for key, _ in self._access.raw_scan(self._key):
            delete(key)


class ReducingState(KeyedState):
    """A value that ``add`` folds new values into with the descriptor's reduce function."""

    descriptor: ReducingStateDescriptor

    def get(self) -> Any:
        raw = self._access.get(self._key)
        return None if raw is None else self._decode(raw)

    def add(self, value: Any) -> None:
        base = self._key
        raw = self._access.get(base)
        origin = "given to add()"
        if raw is not None:
            value = self.descriptor.reduce_function(self._decode(raw), value)
            origin = "returned by the reduce function in add()"
        try:
            new = self._ser.serialize(value)
        except Exception as exc:
            raise self._unfit(value, exc, origin) from exc
        self._access.put(base, new)


class AggregatingState(KeyedState):
    """An accumulator that ``add`` folds inputs into; ``get`` returns the function's result."""

    descriptor: AggregatingStateDescriptor

    def _accumulator(self, base: bytes) -> Optional[Any]:
        raw = self._access.get(base)
        return None if raw is None else self._decode(raw)

    def get(self) -> Any:
        acc = self._accumulator(self._key)
        return None if acc is None else self.descriptor.aggregate_function.get_result(acc)

    def add(self, value: Any) -> None:
        fn = self.descriptor.aggregate_function
        base = self._key
        acc = self._accumulator(base)
        if acc is None:
            acc = fn.create_accumulator()
        self._access.put(base, self._encode_accumulator(fn.add(value, acc), f"{type(fn).__name__}.add()", "add()"))

    def merge_accumulator(self, accumulator: Any) -> None:
        """Merge an accumulator (e.g. a partial aggregate) into the current key's with the
        function's ``merge``."""
        fn = self.descriptor.aggregate_function
        base = self._key
        acc = self._accumulator(base)
        merged = accumulator if acc is None else fn.merge(acc, accumulator)
        made_by = None if acc is None else f"{type(fn).__name__}.merge()"
        self._access.put(base, self._encode_accumulator(merged, made_by, "merge_accumulator()"))

    def _encode_accumulator(self, acc: Any, made_by: Optional[str], call: str) -> bytes:
        try:
            return self._ser.serialize(acc)
        except Exception as exc:
            origin = f"returned by {made_by} in {call}" if made_by else f"given to {call}"
            raise self._unfit(acc, exc, origin, "accumulator") from exc
