"""A schema migration of stored values in chunks (``spark_state.state.evolution``): the result of
one pass, all or nothing, one chunk held at a time. The chunk is forced small
(``evolution.MIGRATION_CHUNK``) so that a state of ten values spans four chunks."""

from __future__ import annotations

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.keys import keyed as K
from spark_state.keys.system import SYSTEM_PREFIX
from spark_state.state import KeyedStateBackend, MapStateDescriptor, StateSchemaIncompatibleError
from spark_state.state import evolution
from spark_state.state.errors import StateMigrationAbortedError

N = 10


class Text:
    """Integers as text (version 1)."""

    schema_version = 1

    def serialize(self, value):
        return str(value).encode()

    def deserialize(self, data):
        return int(data.decode())


class TextV2(Text):
    """Version 2 migrates version 1's bytes; counts its conversions, and fails on ``fail_on``
    from conversion number ``fail_from`` on."""

    schema_version = 2

    def __init__(self, fail_on: int = -1, fail_from: int = 1) -> None:
        self.fail_on, self.fail_from, self.converted = fail_on, fail_from, 0

    def serialize(self, value):
        return f"v2:{value}".encode()

    def deserialize(self, data):
        return int(data.decode()[3:])

    def migrate_from(self, old_snapshot, data):
        self.converted += 1
        value = int(data.decode())
        if value == self.fail_on and self.converted >= self.fail_from:
            raise ValueError(f"cannot migrate {value}")
        return value


def written(tmp_path, name: str) -> VersionedStore:
    """A checkpoint with map state ``m`` of N entries under one key (version 1), loaded at 1."""
    path, config = str(tmp_path / name), EngineConfig(local_dir=str(tmp_path / f"local-{name}"))
    store = VersionedStore(path, config).load(0)
    b = KeyedStateBackend(store)
    s = b.get_map_state(MapStateDescriptor("m", str, Text()))
    b.set_current_key(b"k", 0)
    for i in range(N):
        s.put(f"a{i}", i)
    store.commit()
    store.close()
    return VersionedStore(path, config).load(1)


def data(store: VersionedStore) -> dict:
    return dict(store.iterate(None, SYSTEM_PREFIX))


def test_chunks_give_the_result_of_one_pass_and_hold_one_chunk(tmp_path, monkeypatch) -> None:
    whole = written(tmp_path, "whole")
    KeyedStateBackend(whole).get_map_state(MapStateDescriptor("m", str, TextV2()))
    whole.commit()
    monkeypatch.setattr(evolution, "MIGRATION_CHUNK", 3)
    store = written(tmp_path, "chunked")
    # Record what the migration reads from the store and stages, in order.
    events: list = []
    iterate, put_many = store.iterate, store.put_many

    def counted_iterate(*args, **kwargs):
        events.append("open")
        for row in iterate(*args, **kwargs):
            events.append("row")
            yield row

    def counted_put_many(keys, values):
        events.append(len(keys))
        return put_many(keys, values)

    monkeypatch.setattr(store, "iterate", counted_iterate)
    monkeypatch.setattr(store, "put_many", counted_put_many)
    hook = TextV2()
    b = KeyedStateBackend(store)
    s = b.get_map_state(MapStateDescriptor("m", str, hook))
    # Pass 1 reads every value and stages nothing; pass 2 stages the first chunk as converted
    # then, then takes one chunk per iterator, staged after the iterator is released.
    assert events[: N + 2] == ["open"] + ["row"] * N + [3]
    assert events[N + 2:] == ["open", "row", "row", "row", 3, "open", "row", "row", "row", 3, "open", "row", 1]
    assert hook.converted == N + N - 3                                # the first chunk converted once
    b.set_current_key(b"k", 0)
    assert s.items() == [(f"a{i}", i) for i in range(N)]
    store.commit()
    assert data(store) == data(whole)                                 # the bytes of one pass
    assert store.get(K.entry_key(0, b"m", b"k", b"a9")) == b"v2:9"
    whole.close()
    store.close()


def test_a_value_that_fails_in_a_later_chunk_stages_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(evolution, "MIGRATION_CHUNK", 3)
    store = written(tmp_path, "ckpt")
    before = data(store)
    b = KeyedStateBackend(store)
    with pytest.raises(StateSchemaIncompatibleError, match=r"'m' .* a stored value could not be migrated "
                                                           r"\(ValueError: cannot migrate 8\)\. Nothing was written"):
        b.get_map_state(MapStateDescriptor("m", str, TextV2(fail_on=8)))
    assert not store.has_uncommitted_changes
    # A caller may go on with the epoch (another state under a new name): the old state is intact.
    b.get_map_state(MapStateDescriptor("m2", str, TextV2()))
    store.commit()
    assert data(store) == before
    store.close()


def test_a_conversion_that_fails_only_when_repeated_fails_the_epoch(tmp_path, monkeypatch) -> None:
    """Staged chunks cannot be taken back: a failure in the second pass is not a
    StateSchemaIncompatibleError (which callers may catch), so the epoch is never committed."""
    monkeypatch.setattr(evolution, "MIGRATION_CHUNK", 3)
    store = written(tmp_path, "ckpt")
    with pytest.raises(StateMigrationAbortedError, match=r"state 'm': a stored value that converted .* failed "
                                                         r"when converted again .*cannot migrate 5"):
        KeyedStateBackend(store).get_map_state(MapStateDescriptor("m", str, TextV2(fail_on=5, fail_from=N + 1)))
    assert not isinstance(StateMigrationAbortedError("x"), StateSchemaIncompatibleError)
    store.close()
