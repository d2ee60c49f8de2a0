"""Helpers shared by engine tests: drive a store through random epochs and check restores."""

from __future__ import annotations

import random
import shutil
from typing import Optional

from spark_state import EngineConfig, VersionedStore
from spark_state.state import AggregateFunction


def run_epochs(
    store: VersionedStore,
    epochs: int,
    *,
    seed: int = 7,
    keys: int = 400,
    writes_per_epoch: int = 120,
) -> dict[int, dict[bytes, bytes]]:
    """Commit ``epochs`` epochs of random puts and deletes; return the expected state of
    every version (including version 0), computed independently of the store."""
    rng = random.Random(seed)
    expected: dict[bytes, bytes] = {}
    history = {0: {}}
    store.load(0)
    for _ in range(epochs):
        for _ in range(writes_per_epoch):
            key = b"k%05d" % rng.randrange(keys)
            if rng.random() < 0.2:
                store.delete(key)
                expected.pop(key, None)
            else:
                value = rng.randbytes(rng.randrange(0, 40))
                store.put(key, value)
                expected[key] = value
        version = store.commit()
        history[version] = dict(expected)
    return history


def restored_state(checkpoint, config: EngineConfig, version: int) -> list[tuple[bytes, bytes]]:
    """Load ``version`` in a brand-new store (empty local directory) and dump it."""
    with VersionedStore(checkpoint, config) as fresh:
        fresh.load(version)
        assert fresh.last_restore.mode in ("restore", "empty")
        return list(fresh.iterate())


def wipe(path: Optional[str]) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


class Mean(AggregateFunction):
    """(sum, count) accumulator -> mean (for tests that run in this process; functions shipped
    to Spark's Python workers keep their own copy in a module pickled by value)."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]


class RecordingBuilder:
    """Stands in for ``SparkSession.Builder`` in tests of ``spark_state.configure``: records confs."""

    def __init__(self):
        self._options = {}

    def config(self, key, value):
        self._options[key] = value
        return self
