"""Timer storage and the batch clock, without Spark: byte order, dedup, delete, due scans in
time order, timers moving with their key group, and the watermark rules."""

from __future__ import annotations

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.keys import keyed as K
from spark_state.process import clock as C
from spark_state.state import copy_key_groups
from spark_state.keys.timers import decode_timestamp, encode_timestamp, split_timer_key, timer_key
from spark_state.state.timers import EVENT_TIME, PROCESSING_TIME, TimerQueue, check_timestamp
from spark_state.storage import open_storage


@pytest.fixture(params=["hashmap", "rocksdb"])
def store(tmp_path, request):
    s = VersionedStore(str(tmp_path / "s"), EngineConfig(backend=request.param))
    s.load(0)
    yield s
    s.close()


def test_timestamps_sort_as_signed_numbers():
    values = [-(1 << 63), -5, -1, 0, 1, 1_700_000_000_000, (1 << 63) - 1]
    encoded = [encode_timestamp(v) for v in values]
    assert encoded == sorted(encoded)
    assert [decode_timestamp(e) for e in encoded] == values


def test_timer_entries_live_in_their_key_group_under_a_reserved_name():
    key = timer_key(300, EVENT_TIME, 42, b"\x01user")
    assert K.key_group_of(key) == 300
    assert split_timer_key(key) == (300, EVENT_TIME, 42, b"\x01user")
    # the name part is [len 2][0xFF 'T'], never the UTF-8 of a state name
    assert K.state_name_of(key) == b"\xffT"
    with pytest.raises(UnicodeDecodeError):
        b"\xffT".decode("utf-8")


def test_register_is_idempotent_delete_works_and_due_is_in_time_order(store):
    q = TimerQueue(store)
    for ts, key in [(30, b"b"), (10, b"a"), (20, b"c"), (10, b"a"), (-5, b"z"), (10, b"b")]:
        q.register(7, key, EVENT_TIME, ts)
    q.register(7, b"a", PROCESSING_TIME, 1)
    q.register(8, b"a", EVENT_TIME, 0)
    assert list(q.due(7, EVENT_TIME, 20)) == [(-5, b"z"), (10, b"a"), (10, b"b"), (20, b"c")]
    q.delete(7, b"a", EVENT_TIME, 10)
    q.delete(7, b"nope", EVENT_TIME, 10)  # no-op
    assert list(q.due(7, EVENT_TIME, (1 << 63) - 1)) == [(-5, b"z"), (10, b"b"), (20, b"c"), (30, b"b")]
    assert list(q.due(7, PROCESSING_TIME, 0)) == []
    assert q.timers_of(7, b"b") == [(EVENT_TIME, 10), (EVENT_TIME, 30)]
    assert q.exists(8, b"a", EVENT_TIME, 0) and not q.exists(8, b"a", EVENT_TIME, 1)


def test_timers_move_with_their_key_group(tmp_path):
    config = EngineConfig(backend="hashmap")
    src = VersionedStore(str(tmp_path / "src"), config)
    src.load(0)
    q = TimerQueue(src)
    for kg in range(10):
        q.register(kg, b"k%d" % kg, EVENT_TIME, 100 + kg)
    src.commit()
    dst = VersionedStore(str(tmp_path / "dst"), config)
    dst.load(0)
    copy_key_groups(src, dst, 3, 5)
    moved = TimerQueue(dst)
    assert [(kg, list(moved.due(kg, EVENT_TIME, 1000))) for kg in range(10) if list(moved.due(kg, EVENT_TIME, 1000))] \
        == [(3, [(103, b"k3")]), (4, [(104, b"k4")]), (5, [(105, b"k5")])]
    src.close()
    dst.close()


def test_timestamps_must_be_int_milliseconds():
    assert check_timestamp(5) == 5
    with pytest.raises(TypeError, match="epoch milliseconds"):
        check_timestamp(1.5)
    with pytest.raises(TypeError):
        check_timestamp(True)
    with pytest.raises(ValueError, match="64-bit"):
        check_timestamp(1 << 63)


# ------------------------------------------------------------------------------ batch clock
def test_watermark_is_max_event_minus_delay_never_backwards_min_over_sides():
    first = C.compute(0, None, {}, {"1": 1000}, now_ms=50)
    assert (first.watermark_ms, first.processing_time_ms) == (C.INITIAL_WATERMARK, 50)
    b1 = C.compute(1, first, {"1": 10_000}, {"1": 1000}, now_ms=40)
    assert (b1.watermark_ms, b1.processing_time_ms) == (9000, 50)  # processing time never goes back
    b2 = C.compute(2, b1, {"1": 5000}, {"1": 1000}, now_ms=60)  # an older max changes nothing
    assert b2.watermark_ms == 9000 and b2.max_event_ms == {"1": 10_000}
    # two sides: the min over sides that saw rows, and never backwards when a side starts late
    b3 = C.compute(3, b2, {"2": 4000}, {"1": 1000, "2": 0}, now_ms=70)
    assert b3.watermark_ms == 9000
    b4 = C.compute(4, b3, {"2": 20_000}, {"1": 1000, "2": 0}, now_ms=70)
    assert b4.watermark_ms == 9000  # side 1 still at 10 000 - 1000
    b5 = C.compute(5, b4, {"1": 30_000}, {"1": 1000, "2": 0}, now_ms=70)
    assert b5.watermark_ms == 20_000


def test_the_first_task_of_a_batch_fixes_its_time_for_every_other_task(tmp_path):
    storage = open_storage(str(tmp_path / "loc"), {})
    assert C.resolve(storage, 0, {"1": 100}, now_ms=1).watermark_ms == 0
    C.record_max_event_time(storage, 0, 1, 4, 0, 5000)
    C.record_max_event_time(storage, 0, 1, 4, 3, 7000)
    C.record_max_event_time(storage, 0, 1, 3, 1, 7000)  # a re-run at another parallelism: same max
    t = C.resolve(storage, 1, {"1": 100}, now_ms=10)
    assert (t.watermark_ms, t.processing_time_ms) == (6900, 10)
    # a retry, another partition, a restart: the record decides, whatever their clocks say
    again = C.resolve(storage, 1, {"1": 100}, now_ms=999)
    assert again == t
    # a clock record of batch 2 appears even when batch 1 saw no event time
    assert C.resolve(storage, 2, {"1": 100}, now_ms=20).watermark_ms == 6900


def test_old_clock_records_are_cleaned(tmp_path):
    storage = open_storage(str(tmp_path / "loc"), {})
    for b in range(C.RETAINED_BATCHES + 3):
        C.record_max_event_time(storage, b, 1, 1, 0, b)
        C.resolve(storage, b, {"1": 0}, now_ms=b)
    names = storage.list_dir(C.CLOCK_DIR)
    assert "0.json" not in names and "2.json" not in names and f"{C.RETAINED_BATCHES + 2}.json" in names
    # the maxima of a cleaned batch go with their directory (a file system keeps empty ones)
    maxima = tmp_path / "loc" / C.MAXIMA_DIR
    assert sorted(int(d.name) for d in maxima.iterdir()) == list(range(3, C.RETAINED_BATCHES + 3))
