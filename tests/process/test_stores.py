"""Partition stores without Spark: versions per batch, the worker cache and when it must not be
trusted, rescale layouts, missing versions, the location's metadata."""

from __future__ import annotations

import json
import logging
import time

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.process import MaxParallelismMismatchError, StateLocationError, StateVersionMissingError
from spark_state.process.location import (
    Layout,
    LocationSpec,
    list_layouts,
    run_context,
    run_id_of_task,
    storage_for,
    verify_location,
)
from spark_state.process.stores import CACHE, acquire

CONFIG = EngineConfig(backend="hashmap")


def _all(old):
    return range(old.parallelism)


def _copy_all(store, old, old_stores):
    for source in old_stores.values():
        for key, value in source.iterate():
            store.put(key, value)


def _acquire(storage, n, i, batch, run="run-1"):
    return acquire(storage, CONFIG, n, i, batch, _all, _copy_all, run_context(storage, run))


@pytest.fixture
def storage(tmp_path):
    CACHE.clear()
    yield storage_for(str(tmp_path / "loc"), {})
    CACHE.clear()


def test_batches_commit_successive_versions_and_reuse_the_cached_store(storage):
    ps = _acquire(storage, 1, 0, 0)
    assert ps.origin == "new"
    ps.store.put(b"k", b"1")
    assert ps.commit() == 1
    ps = _acquire(storage, 1, 0, 1)
    assert ps.origin == "cached" and ps.store.get(b"k") == b"1"
    ps.store.put(b"k", b"2")
    assert ps.commit() == 2
    # a retry of batch 1 (after its commit) reloads version 1, not the cached version 2
    ps = _acquire(storage, 1, 0, 1)
    assert ps.origin == "loaded" and ps.store.get(b"k") == b"1"
    ps.discard()


def test_a_later_attempt_of_the_same_run_cannot_replace_a_committed_version(storage):
    ps = _acquire(storage, 1, 0, 0)
    ps.store.put(b"k", b"mine")
    ps.commit()
    # another worker process runs batch 0 again in the same run (a speculative twin): its
    # commit is a no-op, so the cached copy stays the committed one
    ctx = run_context(storage, "run-1").at_offset(0)
    with VersionedStore(storage.child(Layout(1, 0).store_path(0)), CONFIG, runs=ctx) as other:
        other.load(0)
        other.put(b"k", b"theirs")
        other.commit()
        assert other.last_commit.lost_to_earlier_attempt == "replaced"
    ps = _acquire(storage, 1, 0, 1)
    assert ps.origin == "cached" and ps.store.get(b"k") == b"mine"
    ps.discard()


def test_a_batch_re_run_by_a_later_run_is_not_served_from_the_cache(storage):
    ps = _acquire(storage, 1, 0, 0, run="run-1")
    ps.store.put(b"k", b"abandoned")
    ps.commit()   # ... and batch 0 never reached Spark's commit log
    # the query restarts; its batch 0 re-runs in another worker process
    ctx = run_context(storage, "run-2").at_offset(0)
    with VersionedStore(storage.child(Layout(1, 0).store_path(0)), CONFIG, runs=ctx) as other:
        other.load(0)
        other.put(b"k", b"re-run")
        other.commit()
    ps = _acquire(storage, 1, 0, 1, run="run-2")
    assert ps.origin == "loaded" and ps.store.get(b"k") == b"re-run"
    ps.discard()


def test_abandoned_rescale_is_never_read_after_a_re_run_at_the_old_parallelism(storage):
    """Batch 1 runs at parallelism 3 (a rescale from 2), one partition commits, the batch
    fails; the query is re-run at parallelism 2 with different results. Batch 2 at
    parallelism 3 again must rescale from the re-run, not from the abandoned layout."""
    for i in range(2):
        ps = _acquire(storage, 2, i, 0, run="r1")
        ps.store.put(b"k%d" % i, b"batch0")
        ps.commit()
    for i in range(3):   # batch 1 of run 2 at parallelism 3: every partition commits, batch fails later
        ps = _acquire(storage, 3, i, 1, run="r2")
        ps.store.put(b"p3-%d" % i, b"abandoned")
        ps.commit()
    for i in range(2):   # run 3 re-runs batch 1 at parallelism 2
        ps = _acquire(storage, 2, i, 1, run="r3")
        ps.store.put(b"k%d" % i, b"re-run")
        ps.commit()
    for n in (2, 3):     # run 4 reads batch version 2 at either parallelism: only run 3's state
        seen = {}
        for i in range(n):
            ps = _acquire(storage, n, i, 2, run=f"r4-{n}")
            seen.update(ps.store.iterate())
            ps.discard()
        assert seen == {b"k0": b"re-run", b"k1": b"re-run"}


def test_run_id_comes_from_the_job_description_or_group():
    rid = "61d75dbf-a07c-4afd-8da5-2c654a0f9dd5"
    assert run_id_of_task({"spark.job.description": f"q\nid = x\nrunId = {rid}\nbatch = 0"}) == rid
    assert run_id_of_task({"spark.jobGroup.id": rid}) == rid
    assert run_id_of_task({}) is None


def test_rescale_builds_a_new_layout_and_a_missing_version_is_a_clear_error(storage):
    for i in range(2):
        ps = _acquire(storage, 2, i, 0)
        ps.store.put(b"k%d" % i, b"v")
        ps.commit()
    ps = _acquire(storage, 3, 1, 1)
    assert ps.origin == "rescaled" and ps.layout == Layout(3, 1)
    assert sorted(k for k, _ in ps.store.iterate()) == [b"k0", b"k1"]
    assert ps.commit() == 2
    assert list_layouts(storage) == [Layout(2, 0), Layout(3, 1)]
    with pytest.raises(StateVersionMissingError, match=r"no state for batch 7 .*p2-b0 \(batch versions 1\.\.1\)"):
        _acquire(storage, 3, 0, 7)


def test_location_metadata_pins_kind_and_max_parallelism(tmp_path):
    s = storage_for(str(tmp_path / "meta"), {})
    verify_location(s, "keyed", 128)
    with pytest.raises(MaxParallelismMismatchError, match="pass max_parallelism=128"):
        verify_location(s, "keyed", 256)
    with pytest.raises(StateLocationError, match="holds state of a 'keyed' operator"):
        verify_location(s, "operator", None)
    # the key columns: recorded by the first run that knows them, then checked
    verify_location(s, "keyed", 128, {"columns": ["user"], "types": ["string"]})
    assert json.loads(s.read_bytes("_operator.json"))["key"] == {"columns": ["user"], "types": ["string"]}
    verify_location(s, "keyed", 128, {"columns": ["name"], "types": ["string"]})  # a rename keeps the bytes
    with pytest.raises(StateLocationError, match=r"keyed by user string but this run keys by user bigint"):
        verify_location(s, "keyed", 128, {"columns": ["user"], "types": ["bigint"]})
    spec = LocationSpec(explicit=None, root="s3://b/root/", name="Fn")
    assert spec.resolve("q-1", None) == "s3://b/root/q-1/Fn"
    with pytest.raises(StateLocationError, match="sql.streaming.queryId"):
        spec.resolve(None, None)
    beside = LocationSpec(explicit=None, root=None, name="Fn")
    assert beside.resolve("q-1", "s3a://b/ckpt/") == "s3a://b/ckpt/spark-state/Fn"
    with pytest.raises(StateLocationError, match="spark.sparkState.checkpointRoot"):
        beside.resolve("q-1", None)


def test_a_local_location_without_the_state_of_earlier_batches_names_the_unshared_path(storage):
    """What a task on another host of a cluster sees when the state location is a local path:
    the query has run batches, this host has none of their state -- an error, not an empty start."""
    with pytest.raises(StateVersionMissingError, match=r"no state for batch 3 .*is a local path: executors on "
                                                       r"different hosts do not share it"):
        _acquire(storage, 2, 1, 3)


def test_loads_report_what_they_did_and_a_slow_one_is_logged(storage, caplog, monkeypatch):
    """A store the worker holds costs nothing; one another run committed is restored (its figures
    in the task's store); with load.warnAfterMs below the load's time, one WARN line says why; a
    rescale reports the loads of the old stores it read."""
    from spark_state.process import stores as stores_mod
    from spark_state.process.stores import store_observation

    ps = _acquire(storage, 1, 0, 0)
    ps.store.put(b"k", b"v")
    ps.commit()
    cached = _acquire(storage, 1, 0, 1)
    assert cached.origin == "cached" and cached.loads == ()
    assert store_observation(cached, 1)["changelog_bytes_replayed"] == 0
    cached.discard()
    slow = CONFIG.replace(load_warn_after_ms=0)
    with caplog.at_level(logging.WARNING, logger="spark_state.process.stores"):
        quiet = acquire(storage, slow, 1, 0, 1, _all, _copy_all, run_context(storage, "run-2"))
    assert quiet.origin == "loaded" and len(quiet.loads) == 1 and quiet.loads[0].changelogs_replayed == 1
    figures = store_observation(quiet, 1)
    assert figures["load_ms"] > 0 and figures["changelog_bytes_replayed"] == quiet.loads[0].changelog_bytes_replayed > 0
    assert not caplog.records, "load.warnAfterMs=0 logs nothing"
    quiet.discard()
    CACHE.clear()
    eager = CONFIG.replace(load_warn_after_ms=1)
    real = stores_mod._acquire

    def slow_acquire(*args):  # a load of 10 ms, past the 1 ms of load.warnAfterMs
        time.sleep(0.01)
        return real(*args)

    monkeypatch.setattr(stores_mod, "_acquire", slow_acquire)
    with caplog.at_level(logging.WARNING, logger="spark_state.process.stores"):
        logged = acquire(storage, eager, 1, 0, 1, _all, _copy_all, run_context(storage, "run-3"))
    monkeypatch.undo()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "loading batch version 1 of partition 0" in lines[0]
    assert "version 1 restored from checkpoint storage: no snapshot yet, 1 changelogs" in lines[0], lines[0]
    logged.discard()
    rescaled = [acquire(storage, CONFIG, 2, i, 1, _all, _copy_all, run_context(storage, "run-4")) for i in range(2)]
    assert all(ps.origin == "rescaled" and len(ps.loads) == 1 for ps in rescaled)
    for ps in rescaled:
        ps.discard()
