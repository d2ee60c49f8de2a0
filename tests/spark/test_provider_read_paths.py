"""Every read path of the provider's stores sees exactly the version it loaded plus its own pending
writes, on both backends, after any sequence of puts, removes, scans that evict while they iterate,
commits, aborts, readers of older versions, reloads (a new provider instance: a restarted query)
and snapshot captures.

The read paths: ``get``, ``keyExists`` and ``multiGet`` (Spark's defaults over ``get``),
``iterator``, and ``prefixScan`` (prefix-scan stores, as session windows use them). A rocksdb view
is an exported checkpoint with the epochs since layered over it, refreshed every few epochs here;
a hashmap view is the state itself in the JVM heap, with the undo of its last commit for readers of
the version before. Each is compared, at every read, with a dict per committed version.

A scan merges the view with the epoch's pending writes in key order. That merge once took
``Arrays.compareUnsigned``'s result (the difference of the first differing bytes) for a sentinel:
a committed key whose stored bytes were exactly 2 above the next pending key's in the first
differing byte was skipped, so watermark eviction missed it for the batch (windows emitted late,
``dropDuplicatesWithinWatermark`` treating an expired key as a duplicate). The random sequences
here hit that within a few epochs; ``test_scan_merges_view_and_pending_writes_of_every_byte_distance``
pins it.
"""

from __future__ import annotations

import random
import uuid
from typing import Optional

import pytest
from provider_driver import BACKENDS, P, Shim

pytestmark = pytest.mark.spark

#: A refresh of the rocksdb view (a new export) every 3 epochs, a snapshot every 2 commits: both
#: happen many times in each sequence.
CHURN = {P + "rocksdb.viewLayers.maxEpochs": "3", P + "snapshotInterval": "2"}
#: A store's pending writes spill to local disk past 1 KB of heap: every few writes.
SPILL_EVERY_FEW_WRITES = {P + "memory.spillThreshold": "1k"}
GROUPS = 4
KEYS_PER_GROUP = 40


def _overlay(committed: dict, pending: dict) -> dict:
    out = dict(committed)
    for k, n in pending.items():
        if n is None:
            out.pop(k, None)
        else:
            out[k] = n
    return out


class Reader:
    """A store opened at ``version`` and what it must read: the committed content plus its writes."""

    def __init__(self, shim: Shim, version: int, committed: dict, *, upgrade: bool) -> None:
        self.shim = shim
        self.version = version
        self.committed = committed
        self.pending: dict = {}
        # Aggregations and session windows read through a read store upgraded in place.
        self.store = shim.upgrade(shim.read_store(version), version) if upgrade else shim.store(version)

    @property
    def expected(self) -> dict:
        return _overlay(self.committed, self.pending)

    def write(self, k, n: Optional[int]) -> None:
        if n is None:
            self.shim.remove(self.store, k)
        else:
            self.shim.put(self.store, k, n)
        self.pending[k] = n

    def check_all_paths(self, rng: random.Random, where: str) -> None:
        want = self.expected
        shim = self.shim
        assert shim.scan(self.store) == want, f"iterator, {where}"
        probe = [self._random_key(rng) for _ in range(12)] + rng.sample(sorted(want), min(6, len(want)))
        assert [shim.get(self.store, k) for k in probe] == [want.get(k) for k in probe], f"get, {where}"
        assert [shim.key_exists(self.store, k) for k in probe] == [k in want for k in probe], f"keyExists, {where}"
        assert shim.multi_get(self.store, probe) == [want.get(k) for k in probe], f"multiGet, {where}"
        if shim.prefix_cols:
            for g in range(GROUPS):
                part = {k: n for k, n in want.items() if k[0] == g}
                assert shim.prefix_scan(self.store, g) == part, f"prefixScan({g}), {where}"

    def evicting_scan(self, rng: random.Random, where: str) -> None:
        """Scan while removing the keys below a threshold, as watermark eviction does."""
        threshold = rng.randrange(KEYS_PER_GROUP)
        want = self.expected

        def evict(k) -> bool:
            return self._k(k) < threshold

        if self.shim.prefix_cols and rng.random() < 0.5:
            g = rng.randrange(GROUPS)
            seen = self.shim.prefix_scan(self.store, g, evict)
            assert seen == {k: n for k, n in want.items() if k[0] == g}, f"evicting prefixScan({g}), {where}"
            evicted = [k for k in seen if evict(k)]
        else:
            seen = self.shim.scan(self.store, evict)
            assert seen == want, f"evicting iterator, {where}"
            evicted = [k for k in seen if evict(k)]
        for k in evicted:
            self.pending[k] = None

    def _k(self, key) -> int:
        return key[1] if isinstance(key, tuple) else key

    def _random_key(self, rng: random.Random):
        k = rng.randrange(KEYS_PER_GROUP)
        return (rng.randrange(GROUPS), k) if self.shim.prefix_cols else k


def _random_sequence(spark, root: str, confs: dict, prefix_cols: int, seed: int, epochs: int) -> None:
    rng = random.Random(seed)
    shim = Shim(spark, root, confs, prefix_cols=prefix_cols)
    versions: dict[int, dict] = {0: {}}
    try:
        for epoch in range(epochs):
            latest = max(versions)
            where = f"seed {seed}, epoch {epoch}, latest version {latest}"
            if epoch and rng.random() < 0.1:  # a restart: a new provider instance loads from the checkpoint
                shim.close()
                shim = Shim(spark, root, confs, prefix_cols=prefix_cols)
            # Sometimes a reader of the version before (a task retried after its commit, a zombie
            # attempt) first, which must not see the latest commit, then aborts.
            if latest > 0 and rng.random() < 0.25:
                old = Reader(shim, latest - 1, versions[latest - 1], upgrade=False)
                old.check_all_paths(rng, where + f", reader of {latest - 1}")
                old.store.abort()
            reader = Reader(shim, latest, versions[latest], upgrade=rng.random() < 0.5)
            reader.check_all_paths(rng, where + ", at load")
            for _ in range(rng.randrange(1, 40)):
                k = reader._random_key(rng)
                reader.write(k, None if rng.random() < 0.3 else rng.randrange(1_000_000))
            reader.check_all_paths(rng, where + ", after writes")
            if rng.random() < 0.6:
                reader.evicting_scan(rng, where)
                reader.check_all_paths(rng, where + ", after an evicting scan")
            if rng.random() < 0.15:
                reader.store.abort()  # the task failed: nothing of it is committed
                continue
            assert reader.store.commit() == latest + 1
            versions[latest + 1] = reader.expected
            assert reader.store.metrics().numKeys() == len(versions[latest + 1]), where + ", numKeys"
    finally:
        shim.close()


@pytest.mark.parametrize("prefix_cols", [0, 1], ids=["plain-key", "prefix-key"])
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_read_path_sees_exactly_its_version(spark, tmp_path, backend, prefix_cols):
    """Seed 1 runs with a spill threshold of 1 KB: pending writes spill to local disk every few
    writes, and every read path (point reads, multiGet, scans and prefix scans, evicting scans that
    write while they iterate, the commit) must see them there."""
    for seed in range(2):
        root = str(tmp_path / f"state-{seed}-{uuid.uuid4().hex[:6]}")
        confs = {**BACKENDS[backend], **CHURN, **(SPILL_EVERY_FEW_WRITES if seed == 1 else {})}
        _random_sequence(spark, root, confs, prefix_cols, seed, epochs=25)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_scan_merges_view_and_pending_writes_of_every_byte_distance(spark, tmp_path, backend):
    """Committed keys and pending writes whose stored keys differ in their first byte (the key
    group's high byte) by every distance from -255 to 255 on the way through one merged scan: each
    committed key is returned exactly once, pending writes win, tombstones hide."""
    shim = Shim(spark, str(tmp_path / "state"), BACKENDS[backend])
    try:
        # 2,000 int keys cover every high byte of the key group (32768 groups, 128 high bytes).
        committed = {k: k for k in range(0, 4000, 2)}
        assert shim.commit(shim.store(0), committed) == 1
        store = shim.store(1)
        pending = {k: -k for k in range(1, 4000, 4)}  # new keys between the committed ones
        pending.update({k: None for k in range(0, 4000, 8)})  # deletes of committed keys
        pending.update({k: k + 1 for k in range(4, 4000, 8)})  # updates of committed keys
        for k, n in pending.items():
            if n is None:
                shim.remove(store, k)
            else:
                shim.put(store, k, n)
        assert shim.scan(store) == _overlay(committed, pending)
        store.abort()
    finally:
        shim.close()
