"""checkpointed_process: operator state in its three modes, redistributed on 4 -> 3 -> 6, on
real streaming queries; plus Flink's even-split assignment without Spark."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

import process_fns
from process_fns import INPUT_SCHEMA, OPERATOR_OUTPUT, InitializeOnly, OperatorStates, SnapshotOnly
from spark_state import EngineConfig, VersionedStore
from spark_state.process import checkpointed_process, keyed_process
from spark_state.state import ListStateDescriptor, MapStateDescriptor
from spark_state.keys.operator import state_prefix
from spark_state.process.operator_state import SPLIT, UNION, redistribute, split_ranges
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches


def test_even_split_follows_flinks_round_robin_assignment():
    # 5 elements over 3: chunks of 2, 2, 1 from operator 0; the next state starts at 2,
    # the first operator that got the short chunk.
    assert split_ranges(5, 3, 0) == ([(0, 2), (2, 4), (4, 5)], 2)
    assert split_ranges(5, 3, 2) == ([(2, 4), (4, 5), (0, 2)], 1)
    assert split_ranges(6, 3, 1) == ([(4, 6), (0, 2), (2, 4)], 1)
    assert split_ranges(0, 2, 0) == ([(0, 0), (0, 0)], 0)


def test_redistribute_from_stores(tmp_path):
    config = EngineConfig(backend="hashmap")
    old = {}
    for j in range(2):
        s = VersionedStore(str(tmp_path / f"old{j}"), config)
        s.load(0)
        for i, v in enumerate([b"a%d" % j, b"b%d" % j, b"c%d" % j]):
            s.put(state_prefix(SPLIT, "s") + i.to_bytes(4, "big"), v)
            s.put(state_prefix(UNION, "u") + i.to_bytes(4, "big"), v)
        s.put(state_prefix(3, "b") + b"writer", b"%d" % j)
        old[j] = s
    got = {}
    for i in range(3):
        t = VersionedStore(str(tmp_path / f"new{i}"), config)
        t.load(0)
        redistribute(t, i, 3, old)
        got[i] = {k: v for k, v in t.iterate()}
    split = {i: [v for k, v in sorted(got[i].items()) if k.startswith(state_prefix(SPLIT, "s"))] for i in got}
    assert split == {0: [b"a0", b"b0"], 1: [b"c0", b"a1"], 2: [b"b1", b"c1"]}
    for i in got:
        union = [v for k, v in sorted(got[i].items()) if k.startswith(state_prefix(UNION, "u"))]
        assert union == [b"a0", b"b0", b"c0", b"a1", b"b1", b"c1"]
        assert got[i][state_prefix(3, "b") + b"writer"] == b"%d" % (i % 2)


@pytest.mark.spark
@pytest.mark.lines
def test_operator_state_redistribution_on_4_3_6(spark, tmp_path):
    ship_module_by_value(process_fns)
    batches = [[(f"r{b}", b * 100 + i) for i in range(12)] for b in range(6)]
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")

    def run(parallelism, **kwargs):
        return run_query(
            spark, lambda df: checkpointed_process(df, OperatorStates(), OPERATOR_OUTPUT, parallelism=parallelism,
                                                   state_root=root),
            provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
            checkpoint_dir=ckpt, output_mode="append", **kwargs)

    out = merge_runs(run(4, stop_after_batches=2), run(3, stop_after_batches=2), run(6))
    assert sorted(out) == list(range(6))
    # per (batch, partition): restored state and the values it added, in order
    restored, added = {}, defaultdict(list)
    for batch in out.values():
        for b, p, n, seq, v, split, union, writer in batch:
            if seq == 0:
                restored[b, p] = (n, json.loads(split), json.loads(union), writer)
            added[b, p].append((seq, v))
    assert sorted(v for rows in added.values() for _, v in rows) == sorted(v for bt in batches for _, v in bt)
    parallelism = {0: 4, 1: 4, 2: 3, 3: 3, 4: 6, 5: 6}

    def state_after(b, p):
        _, split, union, writer = restored[b, p]
        new = [v for _, v in sorted(added[b, p])]
        return split + new, union + new, writer

    for b in range(1, 6):
        m, n = parallelism[b - 1], parallelism[b]
        assert all((b, p) in restored for p in range(n)), "every partition gets rows each batch"
        old = [state_after(b - 1, j) for j in range(m)]
        for i in range(n):
            _, split, union, writer = restored[b, i]
            if m == n:  # same parallelism: everyone gets back its own state
                assert (split, union, writer) == old[i]
            else:
                everything = [v for s, _, _ in old for v in s]
                lo, hi = split_ranges(len(everything), n, 0)[0][i]
                assert split == everything[lo:hi]
                assert union == [v for _, u, _ in old for v in u]
                assert writer == old[i % m][2]
    # writer: 0..3 from batch 0, then i % 4 at 3 partitions, then (i % 3) at 6
    assert [restored[5, i][3] for i in range(6)] == [0, 1, 2, 0, 1, 2]


@pytest.mark.spark
def test_a_keyed_function_keeps_operator_state_with_either_hook_alone(spark, tmp_path):
    """``initialize_state`` and ``snapshot_state`` are each optional: a keyed function that
    defines one of them runs, and its operator state is kept across batches."""
    from spark_state.state_data import read_function_operator_state

    ship_module_by_value(process_fns)
    batches = [[("a", 1), ("b", 2), ("a", 3)], [("c", 4)]]
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    for name, function in (("init", InitializeOnly()), ("snap", SnapshotOnly())):
        ckpt = str(tmp_path / name)
        out = run_query(spark, lambda df, f=function: keyed_process(df, "k", f, "k string, n bigint", parallelism=1),
                        provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
                        checkpoint_dir=ckpt, output_mode="append")
        rows = sorted(n for batch in out.batches.values() for _, n in batch)
        if name == "init":
            assert rows == [1, 2, 3, 4]  # the list outlives the batch
        else:
            assert rows == [0, 0, 0, 0]
            kept = read_function_operator_state(spark, ckpt, "rows").collect()
            assert sorted(r.value for r in kept) == [1, 3]


def test_operator_state_of_a_keyed_function_has_its_own_keyspace(tmp_path):
    """In a keyed store, key group 0x0301 (769) starts with the byte of broadcast mode 3: the
    0xFE keyspace keeps operator state and keyed state apart, in scans and redistribution."""
    from spark_state.process.operator_state import KEYED_OPERATOR_PREFIX, OperatorStateStore, stored_states
    from spark_state.state import KeyedStateBackend, ValueStateDescriptor

    config = EngineConfig(backend="hashmap")
    s = VersionedStore(str(tmp_path / "keyed"), config)
    s.load(0)
    backend = KeyedStateBackend(s)
    value = backend.get_state(ValueStateDescriptor("b", int))
    backend.set_current_key(b"\x01k", 0x0301)
    value.update(7)
    ops = OperatorStateStore(s, KEYED_OPERATOR_PREFIX)
    ops.get_broadcast_state(MapStateDescriptor("b", str, int)).put("rule", 1)
    ops.get_list_state(ListStateDescriptor("s", int)).add(5)
    ops.flush()
    s.commit()
    assert set(stored_states(s, KEYED_OPERATOR_PREFIX)) == {(3, b"b"), (1, b"s")}
    assert all(k[0] == 0xFE for k, _ in s.iterate(b"\xfe", b"\xff"))
    target = VersionedStore(str(tmp_path / "new"), config)
    target.load(0)
    redistribute(target, 0, 1, {0: s}, KEYED_OPERATOR_PREFIX)
    assert sorted(k for k, _ in target.iterate(None, b"\xff")) == sorted(k for k, _ in s.iterate(b"\xfe", b"\xff"))
    assert value.value() == 7
    s.close()
    target.close()


def test_a_value_that_does_not_fit_fails_the_put_or_add_naming_the_state(tmp_path):
    """Broadcast and list operator state check a value when it is given (put, add), naming the
    state and its declared type, not when the batch's write-back serializes it; a value changed
    in place after it was given is named by the write-back."""
    from spark_state.process.operator_state import OperatorStateStore
    from spark_state.state.errors import StateValueError
    from pyspark.sql.types import ArrayType, LongType

    s = VersionedStore(str(tmp_path / "ops"), EngineConfig(backend="hashmap"))
    s.load(0)
    ops = OperatorStateStore(s)
    rules = ops.get_broadcast_state(MapStateDescriptor("rules", str, int))
    rules.put("min", 3)
    with pytest.raises(StateValueError, match=r"^broadcast state 'rules' holds values of type Python int, not str "
                                              r"'4' \(given to put\(\); TypeError: expected an integer state value, "
                                              r"got str '4'\)$"):
        rules.put("max", "4")
    with pytest.raises(StateValueError, match=r"^broadcast state 'rules' holds keys of type Python str, not int 7 "
                                              r"\(given to put\(\); "):
        rules.put(7, 4)
    buffer = ops.get_list_state(ListStateDescriptor("buffer", ArrayType(LongType())))
    with pytest.raises(StateValueError, match=r"^list state 'buffer' holds values of type array<bigint>, not str "
                                              r"'x' \(given to add\(\); "):
        buffer.add("x")
    held = [1]
    buffer.add(held)
    assert rules.items() == [("min", 3)] and buffer.get() == [[1]]
    held.append("two")  # changed in place after add(): the write-back names it
    with pytest.raises(StateValueError, match=r"^list state 'buffer' holds values of type array<bigint>, not list "
                                              r"\[1, 'two'\] \(held at the end of the batch: changed in place"):
        ops.flush()
    s.close()
