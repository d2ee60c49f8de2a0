"""Schema evolution on the engine: a state registered under a changed descriptor is kept,
migrated or refused on a real VersionedStore (both backends), its record is versioned
with it, TTL stamps survive migrations, and records move with the state on rescale.
Operator state the same way, through ``OperatorStateStore`` and ``redistribute``."""

from __future__ import annotations

import decimal
import warnings

import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from spark_state import EngineConfig, VersionedStore
from spark_state.keys.system import SYSTEM_PREFIX as SYSTEM_KEY_PREFIX
from spark_state.keys import keyed as K
from spark_state.keys.system import keyed_record_key, operator_record_key
from spark_state.process.operator_state import OperatorStateStore, redistribute
from spark_state.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    ReducingStateDescriptor,
    ValueStateDescriptor,
    copy_key_groups,
)
from spark_state.state.errors import StateDecodeError, StateSchemaConflictError, StateSchemaIncompatibleError
from spark_state.state.schema import StateSchema, schema_of
from spark_state.ttl import ManualClock, TtlConfig, codec

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    PICKLE = PickleSerializer()


@pytest.fixture(params=["rocksdb", "hashmap"])
def backend_name(request):
    return request.param


@pytest.fixture
def ckpt(tmp_path, backend_name):
    """Opens stores on one checkpoint: ``ckpt(version)`` -> a store loaded at ``version``."""
    opened = []

    def open_at(version: int) -> VersionedStore:
        store = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(
            backend=backend_name, local_dir=str(tmp_path / f"local{len(opened)}")))
        opened.append(store)
        return store.load(version)

    yield open_at
    for s in opened:
        s.close()


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + value

    def get_result(self, acc):
        return acc


def descriptors(t, ttl=None):
    """One descriptor of every keyed kind over type ``t``."""
    return {
        "value": ValueStateDescriptor("value", t, ttl=ttl),
        "list": ListStateDescriptor("list", t, ttl=ttl),
        "map": MapStateDescriptor("map", str, t, ttl=ttl),
        "reducing": ReducingStateDescriptor("reducing", lambda a, b: a + b, t, ttl=ttl),
        "aggregating": AggregatingStateDescriptor("aggregating", Sum(), t, ttl=ttl),
    }


def write_all(store, t, ttl=None, keys=((b"a", 1), (b"b", 7))):
    """Every kind, two keys: value = n, list = [n, n+1], map {"x": n}, reducing/aggregating sum n."""
    b = KeyedStateBackend(store)
    d = descriptors(t, ttl)
    s = {k: getattr(b, f"get_{'' if k == 'value' else k + '_'}state")(v) for k, v in d.items()}
    for i, (key, kg) in enumerate(keys):
        n = 10 * (i + 1)
        b.set_current_key(key, kg)
        s["value"].update(n)
        s["list"].add_all([n, n + 1])
        s["map"].put("x", n)
        s["reducing"].add(n)
        s["aggregating"].add(n)
    return b


def read_all(store, t, ttl=None, keys=((b"a", 1), (b"b", 7))):
    b = KeyedStateBackend(store)
    d = descriptors(t, ttl)
    s = {k: getattr(b, f"get_{'' if k == 'value' else k + '_'}state")(v) for k, v in d.items()}
    out = {}
    for key, kg in keys:
        b.set_current_key(key, kg)
        out[key] = (s["value"].value(), s["list"].get(), s["map"].items(), s["reducing"].get(), s["aggregating"].get())
    return b, s, out


def record(store, name: str) -> StateSchema:
    return StateSchema.decode(store.get(keyed_record_key(name.encode())), name)


# --------------------------------------------------------------------------- records
def test_registration_records_the_schema_in_the_same_epoch_as_the_state(ckpt) -> None:
    store = ckpt(0)
    b = KeyedStateBackend(store)
    b.get_state(ValueStateDescriptor("count", T.LongType()))
    assert store.get(keyed_record_key(b"count")) == schema_of(ValueStateDescriptor("count", T.LongType())).encode()
    store.abort()                                       # a failed task writes no record either
    assert store.get(keyed_record_key(b"count")) is None
    write_all(store, T.LongType())
    assert store.commit() == 1 and store.num_keys() == 2 * (1 + 3 + 1 + 1 + 1)   # records are not counted
    again = ckpt(1)
    assert record(again, "list") == schema_of(descriptors(T.LongType())["list"])
    assert record(again, "map").key == {"codec": "spark", "type": "string", "declared": "Python str"}


def test_as_is_changes_rewrite_only_the_record(ckpt) -> None:
    store = ckpt(0)
    write_all(store, T.IntegerType())
    store.commit()
    store = ckpt(1)
    before = {k: v for k, v in store.iterate(None, SYSTEM_KEY_PREFIX)}
    _, _, out = read_all(store, T.LongType())           # int -> long: the same int64 bytes
    assert out[b"a"] == (10, [10, 11], [("x", 10)], 10, 10)
    assert {k: v for k, v in store.iterate(None, SYSTEM_KEY_PREFIX)} == before
    assert record(store, "value").value["declared"] == "bigint"   # the record follows the declaration
    store.commit()
    assert record(ckpt(2), "value").value["declared"] == "bigint"


# --------------------------------------------------------------------------- migrations
def test_long_to_double_migrates_every_kind_and_is_durable(ckpt) -> None:
    store = ckpt(0)
    write_all(store, T.LongType())
    store.commit()
    store = ckpt(1)
    b, s, out = read_all(store, T.DoubleType())
    assert out[b"a"] == (10.0, [10.0, 11.0], [("x", 10.0)], 10.0, 10.0)
    assert out[b"b"] == (20.0, [20.0, 21.0], [("x", 20.0)], 20.0, 20.0)
    assert all(isinstance(v, float) for v in (out[b"a"][0], *out[b"a"][1], out[b"a"][3]))
    b.set_current_key(b"a", 1)
    s["list"].add(0.5)                                  # the sequence counter was not migrated
    s["reducing"].add(0.25)
    assert s["list"].get() == [10.0, 11.0, 0.5] and s["reducing"].get() == 10.25
    assert record(store, "list").value["type"] == "double"
    store.commit()
    _, _, out = read_all(ckpt(2), T.DoubleType())
    assert out[b"a"] == (10.0, [10.0, 11.0, 0.5], [("x", 10.0)], 10.25, 10.0)


def test_going_back_after_a_migration_is_judged_as_a_new_change(ckpt) -> None:
    store = ckpt(0)
    write_all(store, T.LongType())
    store.commit()
    store = ckpt(1)
    read_all(store, T.DoubleType())
    store.commit()
    store = ckpt(2)
    with pytest.raises(StateSchemaIncompatibleError) as err:
        KeyedStateBackend(store).get_state(ValueStateDescriptor("value", T.LongType()))
    assert str(err.value).startswith(
        "state 'value' cannot be restored: it was written as value state of double and is now declared "
        "as value state of bigint: double values cannot be narrowed to bigint: fractions would be lost. "
        "Nothing was written; the stored state is unchanged. To fix: keep the old descriptor")
    assert not store.has_uncommitted_changes


def test_incompatible_changes_stage_nothing_and_leave_the_state_readable(ckpt) -> None:
    store = ckpt(0)
    write_all(store, T.LongType())
    store.commit()
    store = ckpt(1)
    b = KeyedStateBackend(store)
    b.get_state(ValueStateDescriptor("fresh", int))     # another state registered first
    with pytest.raises(StateSchemaIncompatibleError,
                       match=r"'value' .* written as value state of bigint and is now declared as value state "
                             r"of string: bigint values cannot be read as string\. .*new name"):
        b.get_state(ValueStateDescriptor("value", "string"))
    with pytest.raises(StateSchemaIncompatibleError,
                       match=r"'list' .* list state of bigint .* value state of bigint: its kind changed"):
        b.get_state(ValueStateDescriptor("list", T.LongType()))
    with pytest.raises(StateSchemaIncompatibleError, match=r"'value' .* list state .* its kind changed"):
        b.get_list_state(ListStateDescriptor("value", T.LongType()))
    with pytest.raises(StateSchemaIncompatibleError, match=r"the map key type changed"):
        b.get_map_state(MapStateDescriptor("map", T.LongType(), T.LongType()))
    store.commit()                                      # only 'fresh' got a record
    _, _, out = read_all(ckpt(2), T.LongType())
    assert out[b"a"] == (10, [10, 11], [("x", 10)], 10, 10)


def test_value_reducing_and_aggregating_read_each_other(ckpt) -> None:
    store = ckpt(0)
    write_all(store, T.LongType())
    store.commit()
    store = ckpt(1)
    b = KeyedStateBackend(store)
    total = b.get_reducing_state(ReducingStateDescriptor("value", lambda a, c: a + c, T.LongType()))
    b.set_current_key(b"a", 1)
    total.add(5)
    assert total.get() == 15 and record(store, "value").kind == "reducing"


def test_struct_evolution_by_field_name(ckpt) -> None:
    old_t = "struct<id:int,name:string,score:int>"
    new_t = "struct<score:double,id:bigint,tags:array<string>>"    # moved, widened, dropped, added
    store = ckpt(0)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("user", old_t))
    b.set_current_key(b"u", 3)
    v.update((1, "ann", 7))
    store.commit()
    store = ckpt(1)
    b = KeyedStateBackend(store)
    v = b.get_state(ValueStateDescriptor("user", new_t))
    b.set_current_key(b"u", 3)
    assert v.value() == Row(score=7.0, id=1, tags=None)
    v.update((8.5, 1, ["new"]))
    store.commit()
    b = KeyedStateBackend(ckpt(2))
    with pytest.raises(StateSchemaIncompatibleError, match="field level is new and NOT NULL"):
        b.get_state(ValueStateDescriptor("user", new_t[:-1] + ",level:int not null>"))
    v = b.get_state(ValueStateDescriptor("user", new_t[:-1] + ",level:int>"))
    b.set_current_key(b"u", 3)
    assert v.value() == Row(score=8.5, id=1, tags=["new"], level=None)


def test_migration_keeps_ttl_stamps_and_expiry(ckpt) -> None:
    clock = ManualClock(1_000)
    ttl = TtlConfig.builder(10_000).clock(clock).build()
    store = ckpt(0)
    write_all(store, T.LongType(), ttl=ttl, keys=((b"a", 1),))
    store.commit()
    stamps = {k: codec.stamp_of(v) for k, v in store.iterate(None, SYSTEM_KEY_PREFIX)}
    assert set(stamps.values()) == {1_000}
    clock.set(4_000)
    store = ckpt(1)
    b = KeyedStateBackend(store)
    value = b.get_state(ValueStateDescriptor("value", T.DoubleType(), ttl=ttl))
    lst = b.get_list_state(ListStateDescriptor("list", T.DoubleType(), ttl=ttl))
    # the rewrite kept every stamp (a read under OnCreateAndWrite refreshes nothing)
    assert {k: codec.stamp_of(v) for k, v in store.iterate(None, SYSTEM_KEY_PREFIX)
            if K.state_name_of(k) in (b"value", b"list")} == {k: s for k, s in stamps.items()
                                                              if K.state_name_of(k) in (b"value", b"list")}
    b.set_current_key(b"a", 1)
    assert value.value() == 10.0 and lst.get() == [10.0, 11.0]
    store.commit()
    clock.set(11_000)                                   # 10 s after the original writes
    b = KeyedStateBackend(ckpt(2))
    value = b.get_state(ValueStateDescriptor("value", T.DoubleType(), ttl=ttl))
    b.set_current_key(b"a", 1)
    assert value.value() is None                        # expired on its original stamp


def test_type_and_ttl_change_together(ckpt) -> None:
    clock = ManualClock(5_000)
    ttl = TtlConfig.builder(1_000).clock(clock).build()
    store = ckpt(0)
    write_all(store, T.LongType(), keys=((b"a", 1),))
    store.commit()
    store = ckpt(1)
    b, s, out = read_all(store, T.DoubleType(), ttl=ttl, keys=((b"a", 1),))   # TTL on, long -> double
    assert out[b"a"] == (10.0, [10.0, 11.0], [("x", 10.0)], 10.0, 10.0)
    assert record(store, "value").ttl_ms == 1_000
    store.commit()
    clock.set(6_000)
    _, _, out = read_all(ckpt(2), T.DoubleType(), ttl=ttl, keys=((b"a", 1),))
    assert out[b"a"] == (None, [], [], None, None)     # stamped at the migration, expired now
    _, _, out = read_all(ckpt(2), T.DoubleType(), keys=((b"a", 1),))          # TTL off again: as is
    assert out[b"a"] == (10.0, [10.0, 11.0], [("x", 10.0)], 10.0, 10.0)


def test_pickled_and_custom_state(ckpt) -> None:
    store = ckpt(0)
    b = KeyedStateBackend(store)
    b.get_state(ValueStateDescriptor("obj", PICKLE))
    b.set_current_key(b"k", 0)
    b.get_state(ValueStateDescriptor("obj", PICKLE)).update({"a": 1})
    b.get_state(ValueStateDescriptor("n", T.LongType())).update(5)
    store.commit()
    b = KeyedStateBackend(ckpt(1))
    with pytest.raises(StateSchemaIncompatibleError, match=r"'obj' .* value state of pickled objects "
                                                           r"\(PickleSerializer\) .* written with PickleSerializer"):
        b.get_state(ValueStateDescriptor("obj", "map<string,bigint>"))
    with pytest.raises(StateSchemaIncompatibleError, match=r"'n' .* reads it with PickleSerializer"):
        b.get_state(ValueStateDescriptor("n", PICKLE))


class Text:
    """Integers as text; version 2 reads version 1's and bigint's bytes."""

    schema_version = 1

    def serialize(self, value):
        return str(value).encode()

    def deserialize(self, data):
        return int(data.decode())


class TextV2(Text):
    schema_version = 2

    def serialize(self, value):
        return f"v2:{value}".encode()

    def deserialize(self, data):
        return int(data.decode()[3:])

    def migrate_from(self, old_snapshot, data):
        if old_snapshot.get("codec") == "spark":
            return int.from_bytes(data, "big", signed=True)
        return int(data.decode())


def test_custom_serializer_versions_and_the_migrate_from_hook(ckpt) -> None:
    store = ckpt(0)
    b = KeyedStateBackend(store)
    s = b.get_map_state(MapStateDescriptor("m", str, Text()))
    b.set_current_key(b"k", 0)
    s.put("a", 1)
    s.put("b", 2)
    store.commit()
    bumped = Text()
    bumped.schema_version = 2
    with pytest.raises(StateSchemaIncompatibleError, match="schema_version changed from 1 to 2 and the new one "
                                                           "has no migrate_from"):
        KeyedStateBackend(ckpt(1)).get_map_state(MapStateDescriptor("m", str, bumped))
    store = ckpt(1)
    b = KeyedStateBackend(store)
    s = b.get_map_state(MapStateDescriptor("m", str, TextV2()))
    b.set_current_key(b"k", 0)
    assert s.items() == [("a", 1), ("b", 2)]
    assert store.get(K.entry_key(0, b"m", b"k", b"a")) == b"v2:1"


def test_state_from_an_earlier_release_is_trusted_and_undecodable_bytes_name_the_state(ckpt) -> None:
    store = ckpt(0)
    b = KeyedStateBackend(store)
    b.set_current_key(b"k", 0)
    b.get_state(ValueStateDescriptor("count", "string")).update("abc")
    store.delete(keyed_record_key(b"count"))            # as written by a release without records
    store.commit()
    b = KeyedStateBackend(ckpt(1))
    count = b.get_state(ValueStateDescriptor("count", T.LongType()))   # no record: trusted
    b.set_current_key(b"k", 0)
    with pytest.raises(StateDecodeError, match=r"state 'count': a stored value does not decode as "
                                               r"<serializer bigint> \(error: .*\)\. The state was probably "
                                               r"written with another type"):
        count.value()


# --------------------------------------------------------------------------- rescale
def _store(tmp_path, name, backend_name):
    return VersionedStore(str(tmp_path / name), EngineConfig(backend=backend_name,
                                                             local_dir=str(tmp_path / f"{name}-local"))).load(0)


def test_records_move_with_the_state_on_rescale(tmp_path, backend_name) -> None:
    sources = [_store(tmp_path, f"s{j}", backend_name) for j in range(2)]
    for j, src in enumerate(sources):
        b = KeyedStateBackend(src)
        v = b.get_state(ValueStateDescriptor("v", T.IntegerType() if j else T.LongType()))  # equivalent
        b.set_current_key(b"k%d" % j, 10 * j)
        v.update(j)
        src.commit()
    target = _store(tmp_path, "t", backend_name)
    assert copy_key_groups(sources[0], target, 0, 5) + copy_key_groups(sources[1], target, 6, 15) == 2
    target.commit()
    assert record(target, "v").value["declared"] == "bigint"   # the first source's
    b = KeyedStateBackend(target)
    v = b.get_state(ValueStateDescriptor("v", T.DoubleType()))  # a migration after the rescale
    b.set_current_key(b"k1", 10)
    assert v.value() == 1.0
    # a source that migrated while another did not (the state is registered outside open())
    conflicting = _store(tmp_path, "c", backend_name)
    b = KeyedStateBackend(conflicting)
    b.get_state(ValueStateDescriptor("v", T.DoubleType()))
    conflicting.commit()
    fresh = _store(tmp_path, "t2", backend_name)
    copy_key_groups(sources[0], fresh, 0, 5)
    with pytest.raises(StateSchemaConflictError, match=r"cannot rescale state 'v': the partitions being merged "
                                                       r"recorded different schemas for it \(value state of bigint "
                                                       r"and value state of double\)"):
        copy_key_groups(conflicting, fresh, 6, 15)
    for s in (*sources, target, conflicting, fresh):
        s.close()


# --------------------------------------------------------------------------- operator state
def test_operator_state_migrates_refuses_and_redistributes_records(tmp_path, backend_name) -> None:
    old = {j: _store(tmp_path, f"op{j}", backend_name) for j in range(2)}
    for j, store in old.items():
        ops = OperatorStateStore(store)
        ops.get_list_state(ListStateDescriptor("split", T.LongType())).add_all([j, j + 10])
        ops.get_union_list_state(ListStateDescriptor("union", "struct<a:int>")).add((j,))
        ops.get_broadcast_state(MapStateDescriptor("rules", str, T.LongType())).put("w", j)
        ops.flush()
        store.commit()
    # the same partition, next batch, with changed types
    ops = OperatorStateStore(old[0])
    split = ops.get_list_state(ListStateDescriptor("split", T.DoubleType()))
    union = ops.get_union_list_state(ListStateDescriptor("union", "struct<a:bigint,b:string>"))
    assert split.get() == [0.0, 10.0] and union.get() == [Row(a=0, b=None)]
    with pytest.raises(StateSchemaIncompatibleError, match=r"'rules' .* broadcast state of string \(declared Python str\) -> bigint "
                                                           r".* broadcast state of string \(declared Python str\) -> string"):
        ops.get_broadcast_state(MapStateDescriptor("rules", str, "string"))
    with pytest.raises(StateSchemaIncompatibleError, match=r"'rules' .* its kind changed from broadcast state to "
                                                           r"union list state"):
        OperatorStateStore(old[1]).get_union_list_state(ListStateDescriptor("rules", T.LongType()))
    ops.flush()
    old[0].commit()
    assert StateSchema.decode(old[0].get(operator_record_key(b"split")), "split").value["type"] == "double"
    # rescale 2 -> 3: partition 0's split state was migrated, partition 1's was not
    target = _store(tmp_path, "new0", backend_name)
    with pytest.raises(StateSchemaConflictError, match="'split'"):
        redistribute(target, 0, 3, old)
    ops = OperatorStateStore(old[1])
    ops.get_list_state(ListStateDescriptor("split", T.DoubleType()))
    ops.get_union_list_state(ListStateDescriptor("union", "struct<a:bigint,b:string>"))
    ops.flush()
    old[1].commit()
    for i in range(3):
        target = _store(tmp_path, f"new{i}x", backend_name)
        redistribute(target, i, 3, old)
        target.commit()
        ops = OperatorStateStore(target)
        assert ops.get_union_list_state(ListStateDescriptor("union", "struct<a:bigint,b:string>")).get() == [
            Row(a=0, b=None), Row(a=1, b=None)]
        rules = ops.get_broadcast_state(MapStateDescriptor("rules", str, T.LongType()))
        assert rules.get("w") == i % 2
        assert all(isinstance(x, float) for x in ops.get_list_state(ListStateDescriptor("split", T.DoubleType())))
        target.close()
    for s in old.values():
        s.close()


def test_operator_state_without_records_still_refuses_a_mode_change(tmp_path, backend_name) -> None:
    store = _store(tmp_path, "op", backend_name)
    ops = OperatorStateStore(store)
    ops.get_list_state(ListStateDescriptor("s", T.LongType())).add(1)
    ops.flush()
    store.delete(operator_record_key(b"s"))             # as written by a release without records
    store.commit()
    with pytest.raises(StateSchemaIncompatibleError, match=r"'s' .* list state .* union list state: operator "
                                                           r"state modes redistribute differently"):
        OperatorStateStore(store).get_union_list_state(ListStateDescriptor("s", T.LongType()))
    with pytest.raises(StateDecodeError, match=r"state 's': a stored value does not decode as <serializer pickle>"):
        OperatorStateStore(store).get_list_state(ListStateDescriptor("s", PICKLE))
    store.close()


def test_decimal_migration(ckpt) -> None:
    store = ckpt(0)
    b = KeyedStateBackend(store)
    b.set_current_key(b"k", 0)
    b.get_state(ValueStateDescriptor("amount", int)).update(12345678901234)
    store.commit()
    b = KeyedStateBackend(ckpt(1))
    amount = b.get_state(ValueStateDescriptor("amount", T.DecimalType(20, 2)))
    b.set_current_key(b"k", 0)
    assert amount.value() == decimal.Decimal(12345678901234)
