"""The provider's pending writes past their memory share (the shim's ChangeBuffer spilling to
SpillRuns on local disk), driven through Py4J on the test session's JVM: a buffer that spills
every few writes answers every lookup and every range (ordered and in hash order) exactly like
one that never spills, and writes the same changes file (keys, values, ops, priors, TTL
touches); a spill while a scan is open does not disturb the scan; clearing the buffer removes
its runs from local disk.

The stores' own read paths with spills (point reads, scans, prefix scans, evicting scans,
commits, restarts) are checked in ``test_provider_read_paths.py``; whole queries in
``test_operator_equivalence.py`` (the ``+spill`` providers).
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.errors import IllegalArgumentException

pytestmark = pytest.mark.spark

PRIOR_ABSENT, PRIOR_EXISTS = -2, -3
STAMP = 8  # bytes of a TTL stamp in front of a stored value


def _buffers(spark, tmp_path):
    sparkstate = spark._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    spilling = sparkstate.ChangeBuffer(0, None, 8 * 1024, spark._jvm.java.io.File(str(spill_dir)))
    plain = sparkstate.ChangeBuffer(0, None, 1 << 40, spark._jvm.java.io.File(str(tmp_path / "never")))
    return sparkstate, spilling, plain, spill_dir


def _entries(iterator) -> list[tuple[bytes, bytes]]:
    out = []
    while iterator.hasNext():
        e = iterator.next()
        out.append((bytes(e.getKey()), bytes(e.getValue())))
    return out


def _changes(spark, buffer, path) -> dict[str, list]:
    assert buffer.writeArrow(spark._jvm.java.io.File(str(path))) >= 0
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all().to_pydict()


def test_a_buffer_that_spills_reads_scans_and_commits_like_one_that_does_not(spark, tmp_path):
    sparkstate, spilling, plain, spill_dir = _buffers(spark, tmp_path)
    rng = random.Random(11)
    keys = [bytes([rng.randrange(256) for _ in range(rng.choice([1, 3, 9, 20]))]) for _ in range(400)]
    # What committed state holds for each key (fixed for the epoch): what a read would find.
    committed = {k: rng.choice([PRIOR_ABSENT, PRIOR_EXISTS, 1_700_000_000_000 + i]) for i, k in enumerate(keys)}
    written: set[bytes] = set()
    for step in range(3000):
        key = rng.choice(keys)
        roll = rng.random()
        # Operators read a key before they write it: the read of committed state comes right before.
        read_first = key not in written and roll < 0.6 and rng.random() < 0.8
        for buffer in (spilling, plain):
            if read_first:
                buffer.notePrior(key, committed[key])
            if roll < 0.45:
                buffer.put(key, b"v%d" % step)
            elif roll < 0.6:
                buffer.remove(key)
            elif key in written:
                pass  # reads of a key written this epoch find the write, not committed state
            elif roll < 0.8:
                buffer.notePrior(key, committed[key])
            else:  # a TTL OnReadAndWrite read of a live committed value
                buffer.touch(key, (1_700_000_000_000).to_bytes(STAMP, "big") + b"read%d" % step)
        if roll < 0.6:
            written.add(key)
        if step % 50 == 0:
            probe = rng.choice(keys)
            got, want = spilling.lookup(probe), plain.lookup(probe)
            assert (None if got is None else bytes(got)) == (None if want is None else bytes(want)), step
        if step % 500 == 499:
            lo, hi = sorted(rng.sample(keys, 2))
            for ordered in (True, False):
                for bounds in ((None, None), (lo, None), (None, hi), (lo, hi)):
                    got = _entries(spilling.range(bounds[0], bounds[1], ordered))
                    want = _entries(plain.range(bounds[0], bounds[1], ordered))
                    if ordered:
                        assert got == want, (step, bounds)
                    else:
                        assert sorted(got) == sorted(want) and len(got) == len(set(got)), (step, bounds)
    assert spilling.spilled() and spilling.spillCount() > 10 and not plain.spilled()
    assert spilling.memoryBytes() < 64 * 1024  # what the heap holds stays near the 8 KB limit
    assert [p for p in spill_dir.iterdir()], "the runs live under the spill directory"

    got = _changes(spark, spilling, tmp_path / "spilling.arrow")
    want = _changes(spark, plain, tmp_path / "plain.arrow")
    for column in ("op", "key", "value"):
        assert got[column] == want[column], column
    assert got["key"] == sorted(got["key"]) and len(got["key"]) == len(set(got["key"]))
    assert set(got["op"]) == {0, 1, 2} and {-1, 0, 1} <= set(got["prior"])
    # What committed state held goes with each spilled write; a read whose key was not yet written
    # when the heap spilled is forgotten (the worker then looks the key up): a prior is the one
    # remembered or unknown (-1, stamp -1), never another.
    rows = list(zip(got["prior"], got["prior_stamp"], want["prior"], want["prior_stamp"]))
    wrong = [r for r in rows if (r[0], r[1]) != (r[2], r[3]) and (r[0], r[1]) != (-1, -1)]
    assert not wrong, wrong[:5]
    known = sum(p != -1 for p, _, _, _ in rows)
    assert known >= 0.5 * sum(wp != -1 for _, _, wp, _ in rows)

    spilling.clear()
    assert not spilling.spilled() and list(spill_dir.iterdir()) == []


def test_a_spill_while_a_scan_is_open_does_not_disturb_it(spark, tmp_path):
    """Eviction writes while it iterates: the scan still returns every entry it started with, once
    (the heap map it iterates is replaced, not cleared, by a spill; writes made meanwhile may or may
    not show, as with any weakly consistent iterator), and later scans see the new writes too."""
    sparkstate, spilling, _, _ = _buffers(spark, tmp_path)
    first = {b"k%04d" % i: b"v%d" % i for i in range(200)}
    for k, v in first.items():
        spilling.put(k, v)
    for ordered in (True, False):
        scan = spilling.range(None, None, ordered)
        seen = []
        while scan.hasNext():
            e = scan.next()
            seen.append(bytes(e.getKey()))
            spilling.remove(e.getKey())  # an evicting scan: a write per entry, spills on the way
            spilling.put(b"new-" + bytes(e.getKey()), b"x" * 40)
        sparkstate.ChangeBuffer.closeRange(scan)
        original = [k for k in seen if k in first]
        assert sorted(original) == sorted(first), ordered
        for k, v in first.items():
            spilling.put(k, v)
    after = dict(_entries(spilling.range(None, None, True)))
    assert {k: v for k, v in after.items() if k in first} == first
    assert {b"new-" + k for k in first} <= set(after)
    assert spilling.spilled()
    spilling.clear()


def test_the_executor_budget_and_its_parts_agree_with_the_python_side(spark):
    """The shim's MemoryBudget applies the same rule as spark_state.memory to this session's conf."""
    from spark_state import memory

    sparkstate = spark._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
    conf = spark.sparkContext.getConf()
    as_dict = {k: v for k, v in conf.getAll()}
    total = sparkstate.MemoryBudget.totalBytes()
    assert total == memory.budget_bytes(as_dict)
    for name in memory.WEIGHTS:
        assert sparkstate.MemoryBudget.part(memory.WEIGHTS[name], total) == memory.part_bytes(name, total), name
    assert sparkstate.MemoryBudget.heapMapsBytes() == memory.part_bytes("heapMaps", total)
    assert sparkstate.MemoryBudget.viewLayersPerStoreBytes() == sparkstate.MemoryBudget.heapBytes()
    assert sparkstate.MemoryBudget.exportChunkBytes() == memory.part_bytes(
        "heap", memory.budget_bytes({**as_dict, "spark.master": "local"})) // 2
    for budget in ("256m", "1g", "3000000"):
        probe = spark._jvm.org.apache.spark.SparkConf(False).set(memory.BUDGET_CONF, budget)
        assert sparkstate.MemoryBudget.fromConf(probe) == memory.budget_bytes({memory.BUDGET_CONF: budget})
    for master, heap in (("local[2]", "1g"), ("local", "3g"), ("local-cluster[2,1,4096]", "3g")):
        probe = spark._jvm.org.apache.spark.SparkConf(False).set("spark.master", master) \
            .set("spark.driver.memory", heap).set("spark.executor.memory", "2g")
        as_python = {"spark.master": master, "spark.driver.memory": heap, "spark.executor.memory": "2g"}
        assert sparkstate.MemoryBudget.fromConf(probe) == memory.budget_bytes(as_python)
        assert sparkstate.MemoryBudget.executorMemory(probe) == memory.executor_memory(as_python) == \
            (2 << 30 if master.startswith("local-cluster") else memory.parse_size(heap))
    bad = spark._jvm.org.apache.spark.SparkConf(False).set(memory.BUDGET_CONF, "lots")
    with pytest.raises(IllegalArgumentException, match="memory.budget must be a size"):
        sparkstate.MemoryBudget.fromConf(bad)
    with pytest.raises(ValueError, match="memory.budget must be a size"):
        memory.budget_bytes({memory.BUDGET_CONF: "lots"})


def test_the_executor_counts_its_task_slots_and_tells_its_python_processes(spark):
    """One rule for task slots (TaskSlots.scala): the conf's cores, local[n]'s, else the cores the
    cluster manager gave the executor (its command line's --cores: standalone leaves the conf
    unset); the executor's Python processes read the JVM's count and budget."""
    from spark_state import memory

    sparkstate = spark._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
    backend = ("org.apache.spark.executor.CoarseGrainedExecutorBackend --driver-url spark://x@h:1 "
               "--executor-id 3 --hostname h --cores 6 --app-id app-1")

    def count(master, command="", processors=2, **conf):
        probe = spark._jvm.org.apache.spark.SparkConf(False).set("spark.master", master)
        for k, v in conf.items():
            probe.set(k.replace("_", "."), v)
        return sparkstate.TaskSlots.count(probe, command, processors)

    assert count("spark://h:7077", backend) == 6  # standalone: the executor's own cores
    assert count("spark://h:7077", backend, spark_executor_cores="3") == 3
    assert count("spark://h:7077", backend, spark_task_cpus="2") == 3
    assert count("spark://h:7077", "", 8) == 8
    assert count("local[3]", backend) == 3 and count("local") == 1 and count("local[*]", "", 5) == 5
    for master in ("local[3]", "local", "local[2,4]", "local-cluster[2,3,1024]"):
        assert count(master, "", 5) == memory.task_slots({"spark.master": master}, processors=5), master

    sparkstate.TaskSlots.publish()  # the plugin's call at executor start; local mode: this JVM

    def figures(batches):
        import pyarrow as pa

        from spark_state import memory as m

        for _ in batches:
            pass
        got = m.executor_figures()
        yield pa.RecordBatch.from_pydict({"slots": [got.task_slots if got else -1],
                                          "budget": [got.budget_bytes if got else -1]})

    rows = spark.range(1, numPartitions=1).mapInArrow(figures, "slots long, budget long").collect()
    assert [(r.slots, r.budget) for r in rows] == [(2, sparkstate.MemoryBudget.totalBytes())]
