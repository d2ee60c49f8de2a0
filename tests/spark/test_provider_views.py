"""The provider's read views, driven store by store through Py4J on the test session's JVM: a reader
of version v never sees v+1 -- neither while v+1 commits beside it (a speculative or zombie
attempt of the same batch on this executor) nor when a task is retried after its commit -- on both
backends; the heap backend's budget fails a task with a message naming the conf; an epoch's
pending writes reach the changes file in RocksDB's key order; and what each written key held
before (the engine's exact key count) is right whether reads remembered it (PriorMap) or the view
answered it at commit.

Real parts only: the shim's SparkStateProvider, its Python worker, checkpoints on local disk.
"""

from __future__ import annotations

import random
import time
import uuid

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from provider_driver import BACKENDS, P, Shim

pytestmark = pytest.mark.spark


@pytest.fixture(params=list(BACKENDS), ids=list(BACKENDS))
def shim(request, spark, tmp_path):
    shim = Shim(spark, str(tmp_path / "state"), BACKENDS[request.param])
    yield shim
    shim.close()


def test_a_reader_of_v_never_sees_v_plus_1_committed_beside_it(shim):
    v1 = {1: 10, 2: 20, 3: 30}
    assert shim.commit(shim.store(0), v1) == 1

    reader = shim.store(1)  # e.g. a zombie attempt of batch 1, still reading
    assert shim.scan(reader) == v1
    writer = shim.store(1)  # the attempt that commits batch 1
    assert shim.commit(writer, {1: 11, 2: None, 4: 40}) == 2
    # The reader still sees version 1, by point reads and by scans, after v2 was committed.
    assert [shim.get(reader, k) for k in (1, 2, 3, 4)] == [10, 20, 30, None]
    assert shim.scan(reader) == v1
    reader.abort()

    v2 = shim.store(2)
    assert shim.scan(v2) == {1: 11, 3: 30, 4: 40}
    assert shim.get(v2, 2) is None
    v2.abort()


def test_a_task_retried_after_its_commit_reads_v_again(shim):
    shim.commit(shim.store(0), {1: 1, 2: 2})
    first = shim.store(1)
    assert shim.get(first, 1) == 1
    assert shim.commit(first, {1: 100, 3: 300}) == 2  # the task then fails after its commit

    retry = shim.store(1)  # Spark's retry of batch 1 loads version 1 again
    assert shim.exported(retry) == 0  # served by the JVM's views (layers; the heap map's undo)
    assert shim.scan(retry) == {1: 1, 2: 2}
    assert [shim.get(retry, k) for k in (1, 2, 3)] == [1, 2, None]
    # The retry computes something else (not deterministic): the first commit stays (first
    # committer wins within a run) and version 2 still reads as it did.
    assert shim.commit(retry, {1: 999}) == 2
    v2 = shim.store(2)
    assert shim.exported(v2) == 0
    assert shim.scan(v2) == {1: 100, 2: 2, 3: 300}
    assert shim.commit(v2, {2: None}) == 3
    v3 = shim.store(3)
    assert shim.scan(v3) == {1: 100, 3: 300}
    v3.abort()


def test_many_epochs_read_exactly_through_layers_and_refreshes(spark, tmp_path):
    """RocksDB views layered over an export and refreshed every 3 epochs, and the heap map, follow
    60 epochs of puts and deletes exactly (checked against a dict after every commit)."""
    for confs in ({P + "rocksdb.viewLayers.maxEpochs": "3"}, BACKENDS["hashmap"]):
        shim = Shim(spark, str(tmp_path / f"state-{len(confs)}-{uuid.uuid4().hex[:6]}"), confs)
        try:
            model: dict[int, int] = {}
            for version in range(60):
                store = shim.store(version)
                writes = {(version * 7 + i) % 50: version * 100 + i for i in range(5)}
                writes[(version * 11) % 50] = None  # a delete
                assert shim.scan(store) == model, f"version {version} ({confs})"
                shim.commit(store, writes)
                for k, n in writes.items():
                    if n is None:
                        model.pop(k, None)
                    else:
                        model[k] = n
        finally:
            shim.close()


def test_key_counts_stay_exact_whether_reads_or_the_view_tell_what_existed(spark, tmp_path):
    """The engine keeps an exact key count from what each written key held before: remembered by
    the reads of a view with a RocksDB base, asked of the view at commit while there is none (the
    query's first versions: a few in-memory layers). Random gets, blind and read puts, deletes of
    present and absent keys, across that switch (a refresh every 2 epochs): the count after every
    commit equals a dict's."""
    shim = Shim(spark, str(tmp_path / "state"), {P + "rocksdb.viewLayers.maxEpochs": "2"})
    rng = random.Random(5)
    model: dict[int, int] = {}
    try:
        for version in range(8):
            store = shim.store(version)
            writes: dict[int, int | None] = {}
            for _ in range(40):
                k = rng.randrange(30)
                if rng.random() < 0.5:
                    assert shim.get(store, k) == (writes[k] if k in writes else model.get(k)), (version, k)
                if rng.random() < 0.7:
                    writes[k] = None if rng.random() < 0.3 else rng.randrange(1000)
                    if writes[k] is None:
                        shim.remove(store, k)
                    else:
                        shim.put(store, k, writes[k])
            store.commit()
            for k, n in writes.items():
                if n is None:
                    model.pop(k, None)
                else:
                    model[k] = n
            assert store.metrics().numKeys() == len(model), f"version {version + 1}"
        last = shim.store(8)
        assert shim.scan(last) == model
        last.abort()
    finally:
        shim.close()


def test_the_prior_map_remembers_every_read_exactly(spark):
    """The shim's PriorMap (key -> what a read found, no object per entry) against a dict: keys of
    0 to 300 bytes (the slab outgrows its first guess), many more than its initial size (the
    table and the entry arrays grow), keys read again (the newer prior wins), and keys never read."""
    sparkstate = spark._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
    priors = sparkstate.PriorMap(16)
    hash_of = sparkstate.HashBytesMap.hash
    missing = sparkstate.PriorMap.Missing()
    rng = random.Random(3)
    model: dict[bytes, int] = {}
    for i in range(3000):
        key = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 8, 9, 20, 300])))
        if model and rng.random() < 0.2:
            key = rng.choice(list(model))  # read again
        prior = rng.choice([-2, -3, rng.randrange(1 << 40)])
        priors.put(bytearray(key), hash_of(bytearray(key)), prior)
        model[key] = prior
    assert priors.size() == len(model)
    for key, prior in model.items():
        assert priors.get(bytearray(key), hash_of(bytearray(key))) == prior, key
    for _ in range(200):
        key = bytes(rng.getrandbits(8) for _ in range(12))
        if key not in model:
            assert priors.get(bytearray(key), hash_of(bytearray(key))) == missing
    priors.clear()
    assert priors.size() == 0 and priors.get(bytearray(b"x"), hash_of(bytearray(b"x"))) == missing


def _settled(read, interval: float = 0.2, quiet_reads: int = 5, limit: float = 30.0) -> int:
    """`read()` once it returned the same value `quiet_reads` times in a row."""
    deadline = time.monotonic() + limit
    last, same = read(), 0
    while same < quiet_reads:
        assert time.monotonic() < deadline, f"the heap budget did not settle within {limit} s (last {last})"
        time.sleep(interval)
        now = read()
        same = same + 1 if now == last else 0
        last = now
    return last


def test_heap_budget_is_released_exactly_as_charged(spark, tmp_path):
    """Stores that open, commit, read and close leave the executor-wide count where it was (it
    once drifted below zero by an empty map's size per store started at version 0, until a small
    budget no longer bound)."""
    state = spark._jvm.org.apache.spark.sql.execution.streaming.state
    budget = state.sparkstate.MemoryBudget
    # The count is executor-wide: stores that earlier tests of this session left loaded would be
    # unloaded by Spark's maintenance thread while this test runs. Unload them all first (and stop
    # the thread; the next StateStore.get starts it again), then wait for the count to settle.
    for query in spark.streams.active:
        query.stop()
    state.StateStore.stop()
    before = _settled(budget.heapMapsUsedBytes)
    for i in range(5):
        shim = Shim(spark, str(tmp_path / f"state-{i}"), BACKENDS["hashmap"])
        shim.store(0).abort()
        shim.commit(shim.store(0), {1: 1, 2: 2})
        reader = shim.store(1)
        shim.commit(shim.store(1), {2: None, 3: 3})
        reader.abort()
        shim.close()
    assert budget.heapMapsUsedBytes() == before


def test_heap_state_over_its_budget_fails_the_task_naming_the_conf(spark, tmp_path):
    shim = Shim(spark, str(tmp_path / "state"), {P + "backend": "hashmap", P + "heap.maxBytes": "4k"})
    try:
        store = shim.store(0)
        with pytest.raises(Py4JJavaError) as excinfo:
            for k in range(1000):
                shim.put(store, k, k)
        message = str(excinfo.value)
        assert "SparkStateException: spark-state: the heap state of this executor would grow to" in message
        assert "spark.sql.streaming.stateStore.sparkState.heap.maxBytes" in message
        assert "backend=rocksdb" in message and "OutOfMemoryError" not in message
        store.abort()
    finally:
        shim.close()
    # The limit was this store's: another store of the executor keeps the budget's heap maps part.
    other = Shim(spark, str(tmp_path / "other"), BACKENDS["hashmap"])
    try:
        assert other.commit(other.store(0), {k: k for k in range(1000)}) == 1
    finally:
        other.close()


def _awkward_keys(rng: random.Random) -> list[bytes]:
    """Keys that stress a sort on the first 8 bytes: empty and short keys, bytes >= 0x80 (unsigned
    order), long runs sharing 8 or more leading bytes, keys differing only in the 7th or 8th byte."""
    keys = {b"", b"\x00", b"\x7f", b"\x80", b"\xff", b"\xff" * 8, b"\x00" * 9}
    while len(keys) < 1500:
        keys.add(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 24))))
    shared = bytes(rng.randrange(256) for _ in range(10))
    keys.update(shared + bytes([rng.randrange(256), rng.randrange(256)]) for _ in range(400))
    head = b"\x01\x02\x03\x04\x05\x06"
    keys.update(head + bytes([a, b]) + b"tail" for a in (0x00, 0x7f, 0x80, 0xff) for b in range(0, 256, 5))
    return list(keys)


def test_pending_writes_reach_the_changes_file_in_unsigned_key_order(spark, tmp_path):
    sparkstate = spark._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
    rng = random.Random(7)
    keys = _awkward_keys(rng)
    rng.shuffle(keys)
    buffer = sparkstate.ChangeBuffer(0)  # no size hint
    expected: dict[bytes, bytes | None] = {}
    for i, k in enumerate(keys):
        if i % 7 == 3:
            buffer.remove(k)
            expected[k] = None
        else:
            value = b"v%d" % i
            buffer.put(k, value)
            expected[k] = value
    for k in keys[:200]:  # a second write of a key: its last value counts
        buffer.put(k, b"again")
        expected[k] = b"again"

    writes = buffer.sortedWrites()
    in_order = sorted(expected)
    assert [bytes(k) for k in writes.keys()] == in_order
    assert list(writes.hashes()) == [sparkstate.HashBytesMap.hash(k) for k in in_order]

    path = tmp_path / "changes.arrow"
    assert buffer.writeArrow(spark._jvm.java.io.File(str(path))) == len(in_order)
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    assert table.column("key").to_pylist() == in_order
    assert table.column("value").to_pylist() == [expected[k] for k in in_order]
    assert table.column("op").to_pylist() == [1 if expected[k] is None else 0 for k in in_order]
    assert set(table.column("prior").to_pylist()) == {-1}  # nothing read: prior unknown
    buffer.clear()  # its reservation goes back to the executor's budget


def _three_layered_versions(shim: Shim) -> dict[int, int]:
    """Three commits on a fresh `rocksdb` store, held by the JVM as layers over the empty state
    (checked: the next load exports nothing); returns the state they make."""
    model: dict[int, int] = {}
    for version in range(3):
        writes = {version * 10 + i: version for i in range(10)}
        shim.commit(shim.store(version), writes)
        model.update(writes)
    held = shim.store(3)
    assert shim.exported(held) == 0
    held.abort()
    return model


def test_pending_writes_take_the_heap_back_from_the_views_layers(spark, tmp_path):
    """The views' layers are a cache: pending writes that find the heap part of the budget full
    reclaim them (least recently extended first) before they would spill, and the store's next
    load exports its version instead, reading exactly what the layers held."""
    sparkstate = spark._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
    pending = getattr(getattr(sparkstate, "MemoryBudget$Pending$"), "MODULE$")
    # Other tests' stores of this JVM may hold layers, less recently extended than this test's,
    # which a reservation would reclaim first: drop them (a cache: their stores export at their
    # next load), so that only this test's layers stand between the part's free room and its limit.
    pending.reclaimAll()
    room = sparkstate.MemoryBudget.pendingLimitBytes() - pending.usedBytes()
    shim = Shim(spark, str(tmp_path / "state"), {})
    try:
        model = _three_layered_versions(shim)
        assert not pending.tryReserve(room)  # the layers hold some of it
        assert pending.reserveForWrites(room)  # all of it, once the layers are dropped
        pending.release(room)
        store = shim.store(3)
        assert shim.exported(store) == 1 and shim.scan(store) == model
        store.abort()
    finally:
        shim.close()


def test_a_scan_opens_at_its_first_read(shim):
    """An iterator reads nothing until it is read (Spark's deduplication asks for one every batch
    and, without a watermark, never reads it), so it sees the store as it is at its first read;
    one never read closes with the store."""
    shim.commit(shim.store(0), {1: 1, 2: 2})
    store = shim.store(1)
    unread = store.iterator("default")
    early = store.iterator("default")
    shim.put(store, 3, 3)
    shim.remove(store, 1)
    assert shim._drain(store, early, None) == {2: 2, 3: 3}
    assert store.commit() == 2  # closes the unread one too
    assert not unread.hasNext()


def test_the_layers_borrow_the_idle_heap_maps_part_until_a_hashmap_store_opens(spark, tmp_path):
    """While no `hashmap` store is open in the executor, the `rocksdb` views' layers may use half of
    the heap maps' part beside the heap part; the first `hashmap` store to open takes it back (the
    layers are dropped: the next load exports), and its close lends it again."""
    state = spark._jvm.org.apache.spark.sql.execution.streaming.state
    budget = state.sparkstate.MemoryBudget
    heap_maps = getattr(getattr(state.sparkstate, "MemoryBudget$HeapMaps$"), "MODULE$")
    for query in spark.streams.active:  # earlier tests' stores: unloaded, as in the budget test above
        query.stop()
    state.StateStore.stop()
    assert heap_maps.openStores() == 0
    assert budget.pendingLimitBytes() == budget.heapBytes() + budget.heapMapsBytes() // 2
    rocks = Shim(spark, str(tmp_path / "rocks"), {})
    try:
        model = _three_layered_versions(rocks)
        heap = Shim(spark, str(tmp_path / "heap"), BACKENDS["hashmap"])
        assert heap_maps.openStores() == 1 and budget.pendingLimitBytes() == budget.heapBytes()
        store = rocks.store(3)
        assert rocks.exported(store) == 1 and rocks.scan(store) == model  # the layers were given back
        store.abort()
        heap.close()
        assert budget.pendingLimitBytes() == budget.heapBytes() + budget.heapMapsBytes() // 2
    finally:
        rocks.close()
