"""Keyed state without TTL: every state type, key scoping, key layout, restore, rescale copy."""

from __future__ import annotations

from pyspark.sql import types as T
import pytest
from support import Mean

from spark_state import EngineConfig, VersionedStore
from spark_state.keys.system import SYSTEM_PREFIX as SYSTEM_KEY_PREFIX
from spark_state.keys import keyed as K
from spark_state.state import (
    AggregatingStateDescriptor,
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
    copy_key_groups,
)


ACC = T.StructType([T.StructField("sum", T.LongType()), T.StructField("n", T.LongType())])


@pytest.fixture(params=["rocksdb", "hashmap"])
def store(request, tmp_path):
    s = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(backend=request.param, local_dir=str(tmp_path / "local")))
    yield s.load(0)
    s.close()


def test_every_state_type_is_scoped_to_the_current_key(store) -> None:
    b = KeyedStateBackend(store)
    count = b.get_state(ValueStateDescriptor("count", int, default=0))
    events = b.get_list_state(ListStateDescriptor("events", str))
    seen = b.get_map_state(MapStateDescriptor("seen", str, T.LongType()))
    total = b.get_reducing_state(ReducingStateDescriptor("total", lambda a, c: a + c, int))
    avg = b.get_aggregating_state(AggregatingStateDescriptor("avg", Mean(), ACC))
    for key, kg, items in [(b"a", 3, [1, 2, 3]), (b"b", 90, [10])]:
        b.set_current_key(key, kg)
        for item in items:
            count.update(count.value() + 1)
            events.add(f"e{item}")
            seen.put(f"s{item}", item)
            total.add(item)
            avg.add(item)
    b.set_current_key(b"a", 3)
    assert (count.value(), events.get(), total.get(), avg.get()) == (3, ["e1", "e2", "e3"], 6, 2.0)
    assert seen.items() == [("s1", 1), ("s2", 2), ("s3", 3)] and seen.get("s2") == 2 and "s9" not in seen
    b.set_current_key(b"b", 90)
    assert (count.value(), events.get(), total.get(), avg.get(), seen.keys()) == (1, ["e10"], 10, 10.0, ["s10"])
    b.set_current_key(b"nobody", 3)
    assert (count.value(), events.get(), total.get(), avg.get(), seen.is_empty()) == (0, [], None, None, True)


def test_clear_and_updates(store) -> None:
    b = KeyedStateBackend(store)
    value = b.get_state(ValueStateDescriptor("v", str))
    lst = b.get_list_state(ListStateDescriptor("l", int))
    mp = b.get_map_state(MapStateDescriptor("m", int, str))
    b.set_current_key(b"k", 1)
    value.update("x"); lst.add_all([1, 2]); mp.put_all({1: "a", 2: "b"})
    store.commit()
    lst.update([9]); mp.remove(1); value.update(None)
    assert (value.value(), lst.get(), mp.items()) == (None, [9], [(2, "b")])
    lst.add(10)
    assert lst.get() == [9, 10]
    for state in (value, lst, mp):
        state.clear()
    assert (value.value(), lst.get(), mp.is_empty()) == (None, [], True)
    store.commit()
    assert store.num_keys() == 0 and list(store.iterate(None, SYSTEM_KEY_PREFIX)) == []


def test_list_add_after_commit_continues_the_sequence(store) -> None:
    b = KeyedStateBackend(store)
    lst = b.get_list_state(ListStateDescriptor("l", str))
    b.set_current_key(b"k", 0)
    lst.add("a")
    store.commit()
    lst.add("b")
    store.commit()
    assert lst.get() == ["a", "b"]
    with pytest.raises(ValueError, match="cannot hold None"):
        lst.add(None)


@pytest.mark.parametrize("write_back", [False, True])
def test_a_value_that_does_not_fit_fails_the_call_naming_the_state(store, write_back) -> None:
    """A wrong value fails the update/add/put that was given it, naming the state, its declared
    type and the value; the state keeps what it held (nothing is staged)."""
    from spark_state.state.errors import StateValueError

    b = KeyedStateBackend(store, write_back=write_back)
    count = b.get_state(ValueStateDescriptor("count", T.LongType()))
    name = b.get_state(ValueStateDescriptor("name", T.StringType()))
    events = b.get_list_state(ListStateDescriptor("events", T.LongType()))
    seen = b.get_map_state(MapStateDescriptor("seen", str, T.LongType()))
    total = b.get_reducing_state(ReducingStateDescriptor("total", lambda a, c: f"{a}{c}", int))
    b.set_current_key(b"a", 3)
    count.update(3)
    events.add_all([1, 2])
    total.add(1)
    with pytest.raises(StateValueError, match=r"^value state 'count' holds values of type bigint, not str '4' "
                                              r"\(given to update\(\); TypeError: expected an integer state value, "
                                              r"got str '4'\)$"):
        count.update("4")
    with pytest.raises(StateValueError, match=r"^value state 'count' holds values of type bigint, not int "
                                              r"9223372036854775808 \(given to update\(\); "):
        count.update(1 << 63)
    with pytest.raises(StateValueError, match=r"^value state 'name' holds values of type string, not str "
                                              r"'\\ud800' \(given to update\(\); UnicodeEncodeError: "):
        name.update("\ud800")
    with pytest.raises(StateValueError, match=r"^list state 'events' holds values of type bigint, not float 2.5 "
                                              r"\(given to add_all\(\); "):
        events.add_all([3, 2.5])
    with pytest.raises(StateValueError, match=r"^list state 'events' holds values of type bigint, not str 'x' "
                                              r"\(given to update\(\); "):
        events.update(["x"])
    with pytest.raises(StateValueError, match=r"^map state 'seen' holds keys of type Python str, not int 1 "
                                              r"\(given to put\(\); TypeError: expected a str state value"):
        seen.put(1, 1)
    with pytest.raises(StateValueError, match=r"^map state 'seen' holds values of type bigint, not str '1' "
                                              r"\(given to put\(\); "):
        seen.put("s", "1")
    with pytest.raises(StateValueError, match=r"^reducing state 'total' holds values of type Python int, not str "
                                              r"'12' \(returned by the reduce function in add\(\); "):
        total.add(2)
    with pytest.raises(StateValueError) as info:
        count.update("4")
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)  # what serializers raise
    b.before_commit()
    store.commit()
    b.set_current_key(b"a", 3)
    assert (count.value(), name.value(), events.get(), seen.items(), total.get()) == (3, None, [1, 2], [], 1)


def test_an_accumulator_that_does_not_fit_names_the_aggregate_function(store) -> None:
    from spark_state.state.errors import StateValueError

    class Broken(Mean):
        def add(self, value, accumulator):
            return ("not", "numbers")

    b = KeyedStateBackend(store)
    avg = b.get_aggregating_state(AggregatingStateDescriptor("avg", Broken(), ACC))
    b.set_current_key(b"a", 3)
    with pytest.raises(StateValueError, match=r"^aggregating state 'avg' holds accumulators of type "
                                              r"struct<sum:bigint,n:bigint>, not tuple \('not', 'numbers'\) "
                                              r"\(returned by Broken.add\(\) in add\(\); "):
        avg.add(1)
    assert avg.get() is None


def test_state_names_are_checked(store) -> None:
    b = KeyedStateBackend(store)
    first = b.get_state(ValueStateDescriptor("s", int))
    assert b.get_state(ValueStateDescriptor("s", int)) is first
    with pytest.raises(ValueError, match="already registered as value state"):
        b.get_list_state(ListStateDescriptor("s", int))
    with pytest.raises(ValueError, match=r"'s' is already registered as value state of bigint .*; declared again "
                                         r"as value state of string"):
        b.get_state(ValueStateDescriptor("s", str))
    assert b.get_state(ValueStateDescriptor("s", "bigint")) is first  # the same type, spelled otherwise
    with pytest.raises(TypeError, match="expected a MapStateDescriptor"):
        b.get_map_state(ValueStateDescriptor("x", int))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        ValueStateDescriptor("", int)


def test_key_layout_is_key_group_first(store) -> None:
    b = KeyedStateBackend(store)
    lst = b.get_list_state(ListStateDescriptor("ev", str))
    b.set_current_key(b"key", 258)
    lst.add("x")
    keys = [k for k, _ in store.iterate(None, SYSTEM_KEY_PREFIX)]
    assert keys == [K.entry_key(258, b"ev", b"key"), K.entry_key(258, b"ev", b"key", K.seq_suffix(0))]
    assert keys[0] == b"\x01\x02" + b"\x02ev" + b"\x00\x00\x00\x03key"
    assert K.split_entry(keys[1]) == (258, b"ev", b"key", K.seq_suffix(0))


def test_committed_state_restores_from_checkpoint(tmp_path) -> None:
    ckpt = str(tmp_path / "ckpt")
    with VersionedStore(ckpt) as store:
        store.load(0)
        b = KeyedStateBackend(store)
        m = b.get_map_state(MapStateDescriptor("m", str, int))
        for i in range(50):
            b.set_current_key(b"k%d" % (i % 7), (i % 7) % 5)
            m.put(f"e{i}", i)
        assert store.commit() == 1
    with VersionedStore(ckpt) as again:
        again.load(1)
        b = KeyedStateBackend(again)
        m = b.get_map_state(MapStateDescriptor("m", str, int))
        b.set_current_key(b"k3", 3)
        assert m.items() == [(f"e{i}", i) for i in sorted(range(3, 50, 7), key=lambda i: f"e{i}")]


def test_copy_key_groups_moves_exactly_the_range(tmp_path) -> None:
    with VersionedStore(str(tmp_path / "a")) as src, VersionedStore(str(tmp_path / "b")) as dst:
        src.load(0); dst.load(0)
        b = KeyedStateBackend(src)
        v = b.get_state(ValueStateDescriptor("v", int))
        for kg in range(10):
            b.set_current_key(b"k", kg)
            v.update(kg)
        src.commit()
        assert copy_key_groups(src, dst, 3, 5) == 3
        dst.commit()
        assert sorted(K.key_group_of(k) for k, _ in dst.iterate(None, SYSTEM_KEY_PREFIX)) == [3, 4, 5]
        assert copy_key_groups(src, dst, 6, 5) == 0
