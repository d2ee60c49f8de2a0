"""Query runs at engine level: first committer wins within a run, copies made by attempts a
later run superseded are never loaded, and a second live writer is fenced off (rules in
``spark_state.checkpoint.runs``)."""

from __future__ import annotations

import os
import threading

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.checkpoint.runs import (
    RunContext,
    RunHistory,
    RunRecord,
    RunRegistry,
    choose_copy,
    is_valid_copy,
    runs_to_fence,
)
from spark_state.errors import ConcurrentWriterError, VersionNotFoundError
from spark_state.storage import open_storage


def _history(*runs: tuple[int, int], fenced=()) -> RunHistory:
    return RunHistory(tuple(RunRecord(seq, f"run-{seq}", start) for seq, start in runs), frozenset(fenced))


# ----------------------------------------------------------------------------- pure rules
def test_a_later_run_supersedes_copies_from_its_start_on():
    # run 1 started at batch 0 and committed versions 1..6, batch 5 (-> version 6) failed part-way;
    # run 2 re-ran from batch 5 (start version 5).
    h = _history((1, 0), (2, 5))
    assert is_valid_copy(5, 1, h, None)          # made by batch 4, committed before run 2 started
    assert not is_valid_copy(6, 1, h, None)      # made by batch 5, which run 1 never committed
    assert choose_copy(6, [1, 2], h, None) == 2
    assert choose_copy(6, [1], h, None) is None  # only the abandoned copy: not a committed state


def test_a_reader_ignores_runs_registered_after_it():
    h = _history((1, 0), (2, 3))
    # run 1 reading: run 2 (a second writer) does not exist for it
    assert choose_copy(5, [1, 2], h, reader_seq=1) == 1
    assert is_valid_copy(5, 1, h, reader_seq=1)
    assert choose_copy(5, [1, 2], h, reader_seq=2) == 2


def test_re_run_that_stopped_before_the_next_batch_still_wins():
    # run 1 abandoned version 8, run 2 re-ran batch 7 (start 7) and stopped after it,
    # run 3 starts at batch 8 and reads version 8: run 2's copy, not run 1's.
    h = _history((1, 0), (2, 7), (3, 8))
    assert choose_copy(8, [1, 2], h, reader_seq=3) == 2
    assert choose_copy(8, [1, 2], h, reader_seq=None) == 2


def test_unranked_copies_from_before_runs_are_kept_until_a_run_supersedes_them():
    h = _history((1, 4))
    assert choose_copy(4, [0], h, None) == 0
    assert choose_copy(5, [0, 1], h, None) == 1
    assert choose_copy(5, [0], h, None) is None


def test_fencing_needs_a_load_past_the_later_runs_start():
    own = RunRecord(1, "a", 0)
    h = _history((1, 0), (2, 7))
    assert runs_to_fence(own, 7, h) == []                  # a zombie finishing batch 7 loads at most 7
    assert [r.seq for r in runs_to_fence(own, 8, h)] == [2]
    assert runs_to_fence(own, 8, _history((1, 0), (2, 7), fenced=[2])) == []


# ----------------------------------------------------------------------------- stores
def _ctx(root, run_id, offset=0) -> RunContext:
    return RunContext(RunRegistry(open_storage(str(root))), run_id, offset)


def _store(root, run_id, tmp_path, backend="rocksdb") -> VersionedStore:
    """A store of run ``run_id``; ``None``: a reader (like Spark's state data source)."""
    config = EngineConfig(backend=backend, local_dir=str(tmp_path / f"local-{run_id}-{os.urandom(3).hex()}"))
    return VersionedStore(str(root), config, runs=_ctx(root, run_id))


def _plain(root, tmp_path) -> VersionedStore:
    """The engine API without runs."""
    return VersionedStore(str(root), EngineConfig(local_dir=str(tmp_path / f"plain-{os.urandom(3).hex()}")))


def _commit_batch(store: VersionedStore, batch: int, value: bytes) -> int:
    store.load(batch)
    store.put(b"k", value)
    store.put(b"batch-%d" % batch, value)
    return store.commit()


def _dump(store: VersionedStore) -> dict[bytes, bytes]:
    return dict(store.iterate())


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_first_committer_wins_within_a_run(tmp_path, backend):
    root = tmp_path / "ckpt"
    first, second = _store(root, "run-a", tmp_path, backend), _store(root, "run-a", tmp_path, backend)
    for s in (first, second):
        s.load(0)
    first.put(b"k", b"first")
    second.put(b"k", b"second")
    assert first.commit() == 1
    assert second.commit() == 1
    assert second.last_commit.lost_to_earlier_attempt == "replaced"
    assert _dump(second) == {b"k": b"first"}       # the loser now holds the winner's version
    names = os.listdir(root / "manifests")
    assert names == ["1.r1.json"]                  # one manifest: never written twice
    with _store(root, None, tmp_path, backend) as reader:
        assert _dump(reader.load(1)) == {b"k": b"first"}
    # the loser goes on from the winner's version
    second.put(b"k2", b"next")
    assert second.commit() == 2
    with _store(root, None, tmp_path, backend) as reader:
        assert _dump(reader.load(2)) == {b"k": b"first", b"k2": b"next"}
    first.close()
    second.close()


def test_identical_retry_keeps_its_local_copy(tmp_path):
    root = tmp_path / "ckpt"
    a, b = _store(root, "run-a", tmp_path), _store(root, "run-a", tmp_path)
    for s in (a, b):
        s.load(0)
        s.put(b"k", b"same")
    a.commit()
    b.commit()
    assert b.last_commit.lost_to_earlier_attempt == "identical"
    assert b.last_restore.mode == "empty"        # no reload was needed
    b.put(b"k", b"later")
    assert b.commit() == 2
    with _store(root, None, tmp_path) as reader:
        assert _dump(reader.load(2)) == {b"k": b"later"}


def test_snapshot_of_a_losing_commit_is_never_referenced(tmp_path):
    root = tmp_path / "ckpt"
    config = EngineConfig(snapshot_interval=1, local_dir=str(tmp_path / "l"))
    a = VersionedStore(str(root), config, runs=_ctx(root, "r"))
    b = VersionedStore(str(root), config, runs=_ctx(root, "r"))
    for s, v in ((a, b"a"), (b, b"b")):
        s.load(0)
        s.put(b"k", v)
    a.commit()
    b.commit()
    for i in range(3):                 # b's later snapshots must upload what they need
        b.put(b"x%d" % i, b"v")
        b.commit()
    b.cleanup()
    with VersionedStore(str(root), EngineConfig(local_dir=str(tmp_path / "r"))) as reader:
        assert _dump(reader.load(4)) == {b"k": b"a", b"x0": b"v", b"x1": b"v", b"x2": b"v"}


def test_abandoned_attempt_of_an_earlier_run_is_never_read(tmp_path):
    root = tmp_path / "ckpt"
    run1 = _store(root, "run-1", tmp_path)
    for batch in range(3):
        _commit_batch(run1, batch, b"r1-%d" % batch)
    # batch 3 of run 1 commits version 4 in this store, then the batch fails elsewhere
    _commit_batch(run1, 3, b"abandoned")
    run1.close()
    # run 2 re-runs batch 3 (its first batch) with different results (a non-deterministic function)
    run2 = _store(root, "run-2", tmp_path)
    _commit_batch(run2, 3, b"r2-3")
    assert _dump(run2)[b"k"] == b"r2-3"
    run2.close()
    # run 3 starts at batch 4: it must read run 2's version 4, though run 1's is also there
    run3 = _store(root, "run-3", tmp_path)
    run3.load(4)
    assert _dump(run3)[b"k"] == b"r2-3"
    assert b"abandoned" not in _dump(run3).values()
    run3.close()
    with _store(root, None, tmp_path) as reader:   # the state reader agrees
        assert _dump(reader.load(4))[b"k"] == b"r2-3"
    assert sorted(os.listdir(root / "manifests"))[-2:] == ["4.r1.json", "4.r2.json"]


def test_only_abandoned_copies_of_a_version_are_not_a_state(tmp_path):
    """Two partitions share one registry (the Python API's layout). Batch 2 of run 1 committed
    partition A only; run 2 re-ran batch 2 and committed partition B before failing again.
    Version 3 of A is then no committed state for anyone: run 2 superseded it."""
    location = open_storage(str(tmp_path / "loc"))

    def store(part, run_id):
        ctx = RunContext(RunRegistry(location), run_id)
        return VersionedStore(location.child(part), EngineConfig(local_dir=str(tmp_path / f"l-{part}-{run_id}")),
                              runs=ctx)

    a1, b1 = store("A", "run-1"), store("B", "run-1")
    for batch in range(2):
        _commit_batch(a1, batch, b"v")
        _commit_batch(b1, batch, b"v")
    _commit_batch(a1, 2, b"abandoned")
    b2 = store("B", "run-2")
    _commit_batch(b2, 2, b"re-run")
    with store("A", None) as reader:
        with pytest.raises(VersionNotFoundError, match="superseded"):
            reader.load(3)
        assert _dump(reader.load(2))[b"k"] == b"v"


def test_a_second_live_writer_is_fenced_and_the_first_goes_on(tmp_path):
    root = tmp_path / "ckpt"
    first = _store(root, "first", tmp_path)
    for batch in range(3):
        _commit_batch(first, batch, b"first-%d" % batch)
    # a second copy of the query starts on the same checkpoint, at batch 3
    second = _store(root, "second", tmp_path)
    _commit_batch(second, 3, b"second-3")
    # the first is still running: it commits batch 3 too (a zombie could do that) ...
    _commit_batch(first, 3, b"first-3")
    assert not os.path.exists(root / "runs" / "2.fenced")
    # ... and then starts batch 4, which proves it is alive: the second is fenced off
    first.load(4)
    assert _dump(first)[b"k"] == b"first-3"    # its own copy, never the second's
    assert os.path.exists(root / "runs" / "2.fenced")
    first.put(b"k", b"first-4")
    assert first.commit() == 5
    with pytest.raises(ConcurrentWriterError) as err:
        second.load(4)
    message = str(err.value)
    assert "run second" in message and "run first" in message and "fenced off" in message
    second.put(b"k", b"x")
    with pytest.raises(ConcurrentWriterError):
        second.commit()
    first.close()
    second.close()


def test_registration_is_idempotent_under_races(tmp_path):
    root = tmp_path / "ckpt"
    registry = RunRegistry(open_storage(str(root)))
    seqs: list[int] = []

    def register(run_id):
        seqs.append(registry.register(run_id, 0).seq)

    threads = [threading.Thread(target=register, args=(f"run-{i % 3}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = registry.history()
    assert sorted(r.run_id for r in history.runs) == ["run-0", "run-1", "run-2"]
    assert sorted({r.seq for r in history.runs}) == [1, 2, 3]
    assert set(seqs) == {1, 2, 3}


def test_each_run_record_is_read_once_however_many_loads_list_the_registry(tmp_path):
    """The registry gains a record per query restart; a load must not re-read them all."""
    from spark_state.storage.local import LocalStorage

    class CountingStorage(LocalStorage):  # the real local storage, counting record reads
        reads: list[str] = []

        def read_bytes(self, path):
            self.reads.append(path)
            return super().read_bytes(path)

    storage = CountingStorage(str(tmp_path / "ckpt"))
    writer = RunRegistry(open_storage(str(tmp_path / "ckpt")))
    for i in range(5):
        writer.register(f"run-{i}", i)
    registry = RunRegistry(storage)
    for _ in range(10):
        assert len(registry.history().runs) == 5
    writer.register("run-5", 5)
    assert [r.run_id for r in registry.history().runs][-1] == "run-5"
    assert sorted(storage.reads) == sorted(f"runs/{seq}.json" for seq in range(1, 7))


def test_unranked_checkpoint_of_an_earlier_release_is_continued_by_a_run(tmp_path):
    root = tmp_path / "ckpt"
    with _plain(root, tmp_path) as old:
        for batch in range(3):
            _commit_batch(old, batch, b"old-%d" % batch)
    assert sorted(os.listdir(root / "manifests")) == ["1.json", "2.json", "3.json"]
    run = _store(root, "new", tmp_path)
    run.load(3)
    assert _dump(run)[b"k"] == b"old-2"
    run.put(b"k", b"new-3")
    assert run.commit() == 4
    run.close()
    assert "4.r1.json" in os.listdir(root / "manifests")
    with _store(root, None, tmp_path) as reader:
        assert _dump(reader.load(4))[b"k"] == b"new-3"
    with _plain(root, tmp_path) as plain:           # the engine API without runs reads it too
        assert _dump(plain.load(4))[b"k"] == b"new-3"


def test_retention_keeps_every_copy_of_retained_versions(tmp_path):
    root = tmp_path / "ckpt"
    config = EngineConfig(retained_versions=3, snapshot_interval=2, local_dir=str(tmp_path / "l"))
    run1 = VersionedStore(str(root), config, runs=_ctx(root, "r1"))
    for batch in range(6):
        _commit_batch(run1, batch, b"r1-%d" % batch)
    run1.close()
    run2 = VersionedStore(str(root), config, runs=_ctx(root, "r2"))
    _commit_batch(run2, 5, b"r2-5")           # supersedes run 1's version 6
    run2.put(b"k", b"r2-6")
    run2.commit()
    run2.cleanup()
    run2.close()
    names = sorted(os.listdir(root / "manifests"))
    assert names == ["5.r1.json", "6.r1.json", "6.r2.json", "7.r2.json"]
    with VersionedStore(str(root), config, runs=RunContext(RunRegistry(open_storage(str(root))), None)) as reader:
        for version, value in ((5, b"r1-4"), (6, b"r2-5"), (7, b"r2-6")):
            assert _dump(reader.load(version))[b"k"] == value


def test_a_second_writer_starting_behind_a_live_one_fails_before_writing(tmp_path):
    root = tmp_path / "ckpt"
    first = _store(root, "first", tmp_path)
    for batch in range(6):
        _commit_batch(first, batch, b"first-%d" % batch)
    # a second query with its own (new) checkpoint but the same state location starts at batch 0
    second = _store(root, "second", tmp_path)
    with pytest.raises(ConcurrentWriterError, match=r"run second starts at version 0, but run first .* committed version 6"):
        second.load(0)
    assert not os.path.exists(root / "runs" / "2.json")     # it wrote nothing, not even a record
    first.load(6)                                            # the first goes on
    assert _dump(first)[b"k"] == b"first-5"
    first.close()


def test_a_restart_after_a_crash_mid_batch_is_not_taken_for_a_second_writer(tmp_path):
    root = tmp_path / "ckpt"
    crashed = _store(root, "crashed", tmp_path)
    for batch in range(4):
        _commit_batch(crashed, batch, b"c-%d" % batch)
    # it committed version 4 (batch 3) here, but batch 3 never reached the commit log
    crashed.close()
    restart = _store(root, "restart", tmp_path)
    restart.load(3)                # version 4 exists (v + 1): a crash leaves that, not a live writer
    assert _dump(restart)[b"k"] == b"c-2"
    restart.close()
