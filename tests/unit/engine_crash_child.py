"""Child process of ``test_crash_points.py``: one *run* of a writer on a VersionedStore.

Usage: engine_crash_child.py CHECKPOINT BACKEND RUN_ID UNTIL [--maintenance-snapshots] [--background-snapshots]
                              [--await-uploads]

Loads the newest committed version (a restarted writer picks up where the last one
stopped), then commits versions until ``UNTIL`` with the deterministic epochs of
:func:`epoch_changes`, running ``snapshot()`` after each commit when asked (maintenance), or
with snapshots uploaded in the background as the Spark provider's worker does (with
``--await-uploads``, each commit waits for the upload in flight before the next).
Crash points come from ``SPARK_STATE_TESTING_CRASH_POINTS`` in the environment; a crash
kills this process with SIGKILL. Prints ``DONE <version>`` when it gets to ``UNTIL``.
"""

from __future__ import annotations

import sys


def epoch_changes(version: int) -> tuple[dict[bytes, bytes], list[bytes]]:
    """The puts and deletes of the epoch that makes ``version`` (a function of it alone, so
    a re-commit of a version after a crash writes the same changes)."""
    puts = {f"k{(version * 7 + i * 3) % 50:02d}".encode(): f"{version}-{i}".encode() for i in range(20)}
    deletes = [f"k{(version * 11) % 50:02d}".encode()] if version % 3 == 0 else []
    for key in deletes:
        puts.pop(key, None)
    return puts, deletes


def model(version: int) -> dict[bytes, bytes]:
    """The state after ``version``."""
    state: dict[bytes, bytes] = {}
    for v in range(1, version + 1):
        puts, deletes = epoch_changes(v)
        state.update(puts)
        for key in deletes:
            state.pop(key, None)
    return state


def main(checkpoint: str, backend: str, run_id: str, until: int, maintenance_snapshots: bool,
         background_snapshots: bool = False, await_uploads: bool = False) -> None:
    from spark_state import EngineConfig, VersionedStore
    from spark_state.checkpoint.runs import RunContext, RunRegistry
    from spark_state.storage import open_storage

    config = EngineConfig(backend=backend, snapshot_interval=2, retained_versions=2)
    storage = open_storage(checkpoint)
    store = VersionedStore(storage, config, runs=RunContext(RunRegistry(storage), run_id),
                           background_snapshots=background_snapshots)
    version = store.latest_version()
    store.load(version)
    while version < until:
        puts, deletes = epoch_changes(version + 1)
        store.put_many(puts.keys(), puts.values())
        store.delete_many(deletes)
        version = store.commit()
        if maintenance_snapshots:
            store.snapshot()
        if await_uploads and store._background is not None:
            # As when micro-batches are slower than an upload: the upload started by this commit
            # lands (or reaches its crash point) before the next commit.
            store._background.wait()
    store.close()
    print(f"DONE {version}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), "--maintenance-snapshots" in sys.argv[5:],
         "--background-snapshots" in sys.argv[5:], "--await-uploads" in sys.argv[5:])
