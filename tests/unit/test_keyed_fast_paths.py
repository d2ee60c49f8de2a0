"""The per-row fast paths of keyed state and the lean keyed loop (pure code, no Spark):
value-state read cache and write-back, the list counter's cache and write-back, exact-type
serializers, the grouping of input rows by key, and output batches built without a Python call
per row."""

from __future__ import annotations

import gc
import random
import struct
from datetime import datetime, timedelta, timezone
from collections import defaultdict

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from spark_state import EngineConfig, VersionedStore
from spark_state.process.arrow_io import OutputWriter, column_values
from spark_state.process.errors import OutputSchemaError
from spark_state.process.routing import KEY_GROUP_COLUMN, ROUTE_COLUMN
from spark_state.process.gc_pacing import TASK_GEN0_THRESHOLD, task_gc_pacing
from spark_state.process.gc_pacing import paced as _paced
from spark_state.process.keyed_input import BatchLayout as _BatchLayout
from spark_state.process.keyed_input import gathered as _gathered, group_by_key as _group_by_key
from spark_state.state import KeyedStateBackend, ListStateDescriptor, ValueStateDescriptor, serializer_for
from spark_state.state.errors import StateValueError
from spark_state.ttl import ManualClock, TtlConfig


@pytest.fixture(params=["rocksdb", "hashmap"])
def store(request, tmp_path):
    s = VersionedStore(str(tmp_path / "ckpt"), EngineConfig(backend=request.param, local_dir=str(tmp_path / "local")))
    yield s.load(0)
    s.close()


# ------------------------------------------------------------------ serializers
@pytest.mark.parametrize("data_type, value", [
    (T.LongType(), 42), (T.IntegerType(), -7), (T.DoubleType(), 0.1), (T.StringType(), "ü"),
    (T.BinaryType(), b"\x00\xff"), (T.BooleanType(), True),
])
def test_exact_type_values_round_trip_equal_and_of_the_same_type(data_type, value) -> None:
    ser = serializer_for(data_type)
    back = ser.deserialize(ser.serialize(value))
    assert back == value and type(back) is ser.exact_type is type(value)


def test_types_without_an_exact_round_trip_promise_none() -> None:
    for t in (T.DateType(), T.TimestampType(), T.DecimalType(10, 2), T.ArrayType(T.LongType()),
              T.StructType([T.StructField("a", T.LongType())])):
        assert serializer_for(t).exact_type is None


def test_fast_serialize_keeps_conversions_and_errors() -> None:
    long_, double = serializer_for(T.LongType()), serializer_for(T.DoubleType())
    assert double.serialize(3) == double.serialize(3.0) and double.deserialize(double.serialize(3)) == 3.0
    with pytest.raises(TypeError):
        long_.serialize(True)  # bool is not an integer state value
    with pytest.raises(TypeError):
        long_.serialize(1.5)
    with pytest.raises(struct.error):
        long_.serialize(1 << 64)  # out of int64


# ------------------------------------------------------------------ value state cache and write-back
def test_write_back_reaches_the_store_at_the_key_switch_and_before_commit(store) -> None:
    b = KeyedStateBackend(store, write_back=True)
    count = b.get_state(ValueStateDescriptor("count", T.LongType(), default=0))
    b.set_current_key(b"a", 1)
    for _ in range(5):
        count.update(count.value() + 1)
    key_a = count._key
    assert store.get(key_a) is None  # pending: one store write per key, not per update
    b.set_current_key(b"b", 2)
    assert store.get(key_a) == serializer_for(T.LongType()).serialize(5)
    count.update(7)
    key_b = count._key
    b.before_commit()
    assert store.get(key_b) == serializer_for(T.LongType()).serialize(7)
    store.commit()
    b2 = KeyedStateBackend(store, write_back=True)
    c2 = b2.get_state(ValueStateDescriptor("count", T.LongType(), default=0))
    b2.set_current_key(b"a", 1)
    assert c2.value() == 5
    b2.set_current_key(b"b", 2)
    assert c2.value() == 7


def test_clear_and_non_exact_values_supersede_a_pending_write(store) -> None:
    b = KeyedStateBackend(store, write_back=True)
    v = b.get_state(ValueStateDescriptor("v", T.DoubleType()))
    b.set_current_key(b"a", 1)
    v.update(1.5)
    v.clear()
    assert v.value() is None
    b.set_current_key(b"b", 1)
    b.set_current_key(b"a", 1)
    assert v.value() is None  # the pending 1.5 was dropped, not written at the switch
    v.update(2.5)
    v.update(3)  # an int for a double state: stored as 3.0, written through
    assert v.value() == 3.0 and type(v.value()) is float
    b.set_current_key(b"b", 1)
    b.set_current_key(b"a", 1)
    assert v.value() == 3.0 and type(v.value()) is float


def test_without_write_back_every_update_is_in_the_store_at_once(store) -> None:
    b = KeyedStateBackend(store)
    s = b.get_state(ValueStateDescriptor("s", T.StringType()))
    b.set_current_key(b"a", 1)
    s.update("x")
    assert store.get(s._key) == b"x" and s.value() == "x"


def test_the_cache_follows_the_current_key_and_writes_through_the_store(store) -> None:
    b = KeyedStateBackend(store, write_back=True)
    s = b.get_state(ValueStateDescriptor("s", T.StringType(), default="-"))
    model: dict[bytes, str] = {}
    rng = random.Random(3)
    for _ in range(400):
        key = rng.choice([b"a", b"b", b"c"])
        b.set_current_key(key, ord(key) % 7)
        for _ in range(rng.randrange(1, 4)):
            assert s.value() == model.get(key, "-")
            op = rng.random()
            if op < 0.15:
                s.clear()
                model.pop(key, None)
            else:
                model[key] = model.get(key, "") + key.decode()
                s.update(model[key])
    b.before_commit()
    store.commit()
    b2 = KeyedStateBackend(store)
    s2 = b2.get_state(ValueStateDescriptor("s", T.StringType(), default="-"))
    for key in (b"a", b"b", b"c"):
        b2.set_current_key(key, ord(key) % 7)
        assert s2.value() == model.get(key, "-")


def test_ttl_value_state_is_not_cached(store) -> None:
    clock = ManualClock(0)
    ttl = TtlConfig.builder(1000).clock(clock).build()
    b = KeyedStateBackend(store, write_back=True)
    v = b.get_state(ValueStateDescriptor("v", T.LongType(), ttl=ttl))
    b.set_current_key(b"a", 1)
    v.update(1)
    assert v.value() == 1
    clock.advance(5000)
    assert v.value() is None  # expired between two reads of the same key


# ------------------------------------------------------------------ list state counter cache and write-back
def _counter(store, state) -> int | None:
    raw = store.get(state._key)  # the list's counter entry: the next sequence number, uint64 BE
    return None if raw is None else struct.unpack(">Q", raw)[0]


def test_a_lists_counter_is_written_at_the_key_switch_and_its_elements_at_once(store) -> None:
    b = KeyedStateBackend(store, write_back=True)
    values = b.get_list_state(ListStateDescriptor("values", T.LongType()))
    b.set_current_key(b"a", 1)
    for v in range(3):
        values.add(v)
    values.add_all([3, 4])
    assert values.get() == [0, 1, 2, 3, 4]  # the elements are in the store already
    assert _counter(store, values) is None  # the counter is pending: one write per key, not per add
    b.set_current_key(b"b", 2)
    values.add(10)
    b.set_current_key(b"a", 1)
    assert _counter(store, values) == 5  # written at the switch, and read back for a's next add
    values.add(5)
    values.update([7, 8])  # a clear drops the pending counter; the list starts again at 0
    values.add(9)
    b.before_commit()
    assert values.get() == [7, 8, 9] and _counter(store, values) == 3
    store.commit()
    b.set_current_key(b"b", 2)
    assert values.get() == [10] and _counter(store, values) == 1


def test_a_list_with_ttl_or_without_write_back_writes_its_counter_with_every_add(store) -> None:
    ttl = TtlConfig.builder(60_000).clock(ManualClock(0)).build()
    for write_back, descriptor in ((False, ListStateDescriptor("plain", T.LongType())),
                                   (True, ListStateDescriptor("ttl", T.LongType(), ttl=ttl))):
        b = KeyedStateBackend(store, write_back=write_back)
        values = b.get_list_state(descriptor)
        b.set_current_key(b"a", 1)
        values.add(1)
        values.add(2)
        assert values.get() == [1, 2]
        assert store.get(values._key) is not None, descriptor.name  # no counter held back


# ------------------------------------------------------------------ grouping input rows
def _batch(keys, vs, kgs, key_type=pa.int64()):
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, key_type), pa.array(vs, pa.int64()), pa.array(kgs, pa.int32())],
        names=["k", "v", KEY_GROUP_COLUMN])


def _model_groups(rows):
    groups = defaultdict(list)
    for k, v, kg in rows:
        groups[k].append((k, v))
    return groups


@pytest.mark.parametrize("key_type", [pa.int64(), pa.string()])
def test_grouping_keeps_input_order_within_a_key_across_gathered_batches(key_type) -> None:
    rng = random.Random(11)
    rows = []
    for i in range(3000):
        k = rng.randrange(50)
        rows.append((k if key_type == pa.int64() else f"k{k}", i, k % 9))
    batches = [_batch(*zip(*rows[o:o + 700]), key_type=key_type) for o in range(0, len(rows), 700)]
    layout = _BatchLayout(batches[0].schema, ["k"])
    assert layout.sort_key_idx == 0
    got = defaultdict(list)
    kg_of = {}
    for run in _gathered(iter(batches + [batches[0].slice(0, 0)]), 1000):
        assert sum(b.num_rows for b in run) >= 1000 or run[-1] is batches[-1]
        for key, kg, group in _group_by_key(run, layout):
            assert all(r.k == key for r in group)
            got[key].extend((r.k, r.v) for r in group)
            kg_of[key] = kg
    assert dict(got) == dict(_model_groups(rows))
    assert all(kg_of[k] == (k if key_type == pa.int64() else int(k[1:])) % 9 for k in kg_of)


def test_keys_with_nulls_and_several_key_columns_group_by_dict() -> None:
    batch = _batch([3, None, 3, None, 1], [1, 2, 3, 4, 5], [0, 1, 0, 1, 2])
    layout = _BatchLayout(batch.schema, ["k"])
    groups = {k: [r.v for r in g] for k, _, g in _group_by_key([batch], layout)}
    assert groups == {3: [1, 3], None: [2, 4], 1: [5]}
    two = _BatchLayout(batch.schema, ["k", "v"])
    assert two.sort_key_idx == -1
    assert sorted((k, [r.v for r in g]) for k, _, g in _group_by_key([_batch([1, 1, 1], [2, 2, 3], [0, 0, 0])], two)) \
        == [((1, 2), [2, 2]), ((1, 3), [3])]


def test_rows_are_namedtuples_of_the_visible_columns() -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 1]), pa.array(["x", "y"]), pa.array([0, 0], pa.int32()), pa.array([5, 5], pa.int32())],
        names=["k", "word", KEY_GROUP_COLUMN, ROUTE_COLUMN])
    layout = _BatchLayout(batch.schema, ["k"])
    [(key, kg, rows)] = _group_by_key([batch], layout)
    assert (key, kg) == (1, 0)
    assert [r._asdict() for r in rows] == [{"k": 1, "word": "x"}, {"k": 1, "word": "y"}]
    assert rows[0].word == "x" and rows[1][1] == "y" and type(rows[0]) is layout.row_cls


# ------------------------------------------------------------------ output
def test_output_rows_of_every_shape_still_convert_and_misfits_still_fail() -> None:
    from pyspark.sql import Row

    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("n", T.LongType())])
    w = OutputWriter(schema, "f")
    w.rows.extend([(1, 2), [3, 4], {"k": 5, "n": 6}, Row(k=7, n=8)])
    assert w.flush().to_pylist() == [{"k": 1, "n": 2}, {"k": 3, "n": 4}, {"k": 5, "n": 6}, {"k": 7, "n": 8}]
    w.rows.extend([(1, 2), (3,)])
    with pytest.raises(OutputSchemaError, match="1 values"):
        w.flush()
    w.rows.extend([(1, 2), (3, 4, 5)])
    with pytest.raises(OutputSchemaError, match="3 values"):
        w.flush()


def test_a_bad_write_back_update_fails_in_update_not_at_the_flush(store) -> None:
    b = KeyedStateBackend(store, write_back=True)
    n = b.get_state(ValueStateDescriptor("n", T.LongType()))
    s = b.get_state(ValueStateDescriptor("s", T.StringType()))
    b.set_current_key(b"a", 1)
    with pytest.raises(StateValueError, match="value state 'n' holds values of type bigint, not int"):
        n.update(1 << 63)
    with pytest.raises(StateValueError, match="value state 's' .* UnicodeEncodeError") as info:
        s.update("\ud800")
    assert isinstance(info.value.__cause__, UnicodeEncodeError)
    n.update((1 << 63) - 1)
    b.before_commit()
    assert n.value() == (1 << 63) - 1
    assert serializer_for(T.LongType()).deserialize(store.get(n._key)) == (1 << 63) - 1


# ------------------------------------------------------------------ input conversion
def _timestamps(unit: str, tz, values: list) -> pa.ChunkedArray:
    """Two chunks of epoch ``values`` (in ``unit``), nulls kept."""
    typ = pa.timestamp(unit, tz=tz)
    half = len(values) // 2
    return pa.chunked_array([pa.array(values[:half], pa.int64()).cast(typ),
                             pa.array(values[half:], pa.int64()).cast(typ)])


@pytest.mark.parametrize("tz", [None, "UTC", "America/Los_Angeles", "Asia/Kolkata", "+05:30", "Etc/GMT+3"])
@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_timestamp_and_date_columns_convert_exactly_as_arrow_does(tz, unit) -> None:
    per_s = {"s": 1, "ms": 1_000, "us": 1_000_000}[unit]
    # around the 2024 US DST changes (ambiguous and skipped local hours), before 1970, the
    # ends of datetime's range (localized within it), sub-second values, nulls
    seconds = [1710064800 + 900 * i for i in range(-8, 9)] + [1730624400 + 900 * i for i in range(-8, 9)]
    seconds += [-1, -86_400 * 365 * 80 - 7, 0, 1_700_000_000]
    values = [s * per_s + (per_s // 3 if per_s > 1 else 0) for s in seconds]
    values += [None, -62_135_596_800 * per_s + 86_400 * per_s, 253_402_300_799 * per_s - 86_400 * per_s, None]
    column = _timestamps(unit, tz, values)
    expected = column.to_pylist()
    got = column_values(column)
    assert got == expected
    for g, e in zip(got, expected):
        assert type(g) is type(e)
        if e is not None:
            assert g.tzinfo == e.tzinfo and g.fold == e.fold and str(g) == str(e)

    for typ in (pa.date32(), pa.date64()):
        days = [-719_162, -1, 0, 19_000, None, 2_932_896]
        dates = pa.array(days, pa.int32()).cast(pa.date32()).cast(typ)
        assert column_values(dates) == dates.to_pylist()
        assert all(type(d) is type(e) for d, e in zip(column_values(dates), dates.to_pylist()))


@pytest.mark.parametrize("tz", ["UTC", "Etc/UTC", "+05:30", "-09:45", "America/New_York"])
def test_random_timestamps_over_the_whole_datetime_range_convert_as_arrow_does(tz) -> None:
    rng = random.Random(tz)
    lo, hi = -62_135_596_800_000_000 + 86_400_000_000, 253_402_300_799_999_999 - 86_400_000_000
    values = [rng.randint(lo, hi) for _ in range(3000)]
    # leap days and century boundaries (1900 and 2100 are not leap years, 2000 is)
    for y, m, d in [(2000, 2, 29), (1900, 2, 28), (1900, 3, 1), (2100, 2, 28), (2100, 3, 1), (1600, 2, 29),
                    (1969, 12, 31), (1970, 1, 1), (4, 2, 29), (9996, 2, 29)]:
        epoch_us = (datetime(y, m, d, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)) \
            // timedelta(microseconds=1)
        values += [epoch_us - 1, epoch_us, epoch_us + 86_399_999_999]
    values[::97] = [None] * len(values[::97])
    column = _timestamps("us", tz, values)
    got, expected = column_values(column), column.to_pylist()
    assert got == expected
    assert [str(g) for g in got] == [str(e) for e in expected]
    # broadcast rows are ordered by their repr: it must not change with the conversion
    assert [repr(g) for g in got] == [repr(e) for e in expected]


def test_columns_without_a_fast_path_or_out_of_its_range_keep_arrows_conversion() -> None:
    ns = pa.array([1_700_000_000_123_456_789, None], pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    assert column_values(ns) == ns.to_pylist()
    nulls = pa.array([None, None], pa.timestamp("us", tz="UTC"))
    assert column_values(nulls) == [None, None]
    empty = pa.array([], pa.timestamp("us"))
    assert column_values(empty) == []
    # outside datetime's range: Arrow's own behaviour (an error), not numpy's ints
    far = pa.array([300_000_000_000 * 1_000_000], pa.int64()).cast(pa.timestamp("us"))
    with pytest.raises(OverflowError, match="date value out of range"):
        far.to_pylist()
    with pytest.raises(OverflowError, match="date value out of range"):
        column_values(far)
    # seconds whose microseconds overflow int64: not wrapped into datetime's range
    huge = pa.array([2**62, 0], pa.int64()).cast(pa.timestamp("s", tz="UTC"))
    with pytest.raises(OverflowError, match="too large to convert"):
        huge.to_pylist()
    with pytest.raises(OverflowError, match="too large to convert"):
        column_values(huge)
    far_date = pa.array([2_932_897], pa.int32()).cast(pa.date32())
    with pytest.raises(OverflowError, match="date value out of range"):
        far_date.to_pylist()
    with pytest.raises(OverflowError, match="date value out of range"):
        column_values(far_date)
    mixed = pa.array([1.5, None, 2.0])
    assert column_values(mixed) == [1.5, None, 2.0]


# ------------------------------------------------------------------ collector pacing
def test_task_gc_pacing_raises_thresholds_for_the_task_and_restores_them() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with task_gc_pacing():
            assert gc.get_threshold() == (TASK_GEN0_THRESHOLD, 20, 100)
        assert gc.get_threshold() == (700, 10, 10)

        def loop():
            yield 1
            raise RuntimeError("task failed")

        paced = _paced(loop())
        assert next(paced) == 1 and gc.get_threshold()[0] == TASK_GEN0_THRESHOLD
        with pytest.raises(RuntimeError):
            next(paced)
        assert gc.get_threshold() == (700, 10, 10)
        abandoned = _paced(iter([1, 2]))
        next(abandoned)
        abandoned.close()
        assert gc.get_threshold() == (700, 10, 10)

        # the application's own choices stand: collector off, or tuned higher already
        gc.set_threshold(200_000, 5, 5)
        with task_gc_pacing():
            assert gc.get_threshold() == (200_000, 5, 5)
        gc.set_threshold(700, 10, 10)
        gc.disable()
        with task_gc_pacing():
            assert gc.get_threshold() == (700, 10, 10) and not gc.isenabled()
    finally:
        gc.enable()
        gc.set_threshold(*before)


def test_cyclic_garbage_made_during_a_paced_task_is_still_collected() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        gc.collect()
        with task_gc_pacing():
            for _ in range(3 * TASK_GEN0_THRESHOLD):
                Node()
            alive = sum(1 for o in gc.get_objects() if type(o) is Node)
        assert alive <= TASK_GEN0_THRESHOLD  # young collections still ran during the task
    finally:
        gc.set_threshold(*before)
