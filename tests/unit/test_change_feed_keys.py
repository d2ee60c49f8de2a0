"""A change feed's changed keys of one batch: in key order, each once, the same whether they fit
in memory or go through the external sort on local disk."""

from __future__ import annotations

import os
import random

from spark_state.keys import keyed as K
from spark_state.state_data.readers.change_feed import changed_keys


def _changes(seed: int, n: int) -> list[tuple[bytes, bytes | None]]:
    """A changelog's rows in no order: values and list elements (suffixed entries) of state
    ``count`` and of another state, some keys written twice, some deleted, and system keys."""
    rng = random.Random(seed)
    rows: list[tuple[bytes, bytes | None]] = []
    for i in range(n):
        key = f"user-{rng.randrange(n // 2)}".encode()
        group = rng.randrange(8)
        suffix = K.seq_suffix(rng.randrange(3)) if rng.random() < 0.3 else b""
        name = b"count" if rng.random() < 0.7 else b"other"
        rows.append((K.entry_key(group, name, key, suffix), None if rng.random() < 0.2 else b"v%d" % i))
    rows.append((b"\xff\x01system", b"x"))
    return rows


def _expected(rows) -> list[tuple[bytes, bytes]]:
    found = {}
    for key, _ in rows:
        if key[:1] == b"\xff" or K.state_name_of(key) != b"count":
            continue
        _, _, key_bytes, suffix = K.split_entry(key)
        found[key[:len(key) - len(suffix)]] = key_bytes
    return sorted(found.items())


def test_changed_keys_are_ordered_and_unique_in_memory_and_through_sorted_runs(tmp_path):
    rows = _changes(7, 5000)
    want = _expected(rows)
    assert len(want) > 1000
    assert list(changed_keys(iter(rows), b"count", str(tmp_path))) == want
    assert os.listdir(tmp_path) == []  # in memory: no runs written
    # 100 keys in memory at most: about 20 sorted runs, merged back in order, each key once
    spilled = changed_keys(iter(rows), b"count", str(tmp_path), in_memory=100)
    assert next(spilled) == want[0]
    assert len(os.listdir(tmp_path)) == 1  # the runs' database, while the keys are read
    assert [want[0], *spilled] == want
    assert os.listdir(tmp_path) == []  # deleted at the end
    assert list(changed_keys(iter([]), b"count", str(tmp_path), in_memory=1)) == []


def _many_changes(n: int):
    """A changelog of ``n`` distinct keys of state ``count`` (8 entries in 10 deleted), generated
    as it is read: the test holds none of it."""
    for i in range(n):
        key = b"user-%09d" % ((i * 7919) % n)  # no order
        yield K.entry_key(i % 128, b"count", key, b""), None if i % 10 == 0 else b"v"


def test_changed_keys_take_memory_of_their_in_memory_part_not_of_the_batch(tmp_path):
    """Python's allocations while a batch's changed keys are sorted and read back stay within what
    ``in_memory`` keys take, at N and 8N keys: past it they are in sorted runs on local disk."""
    import tracemalloc

    list(changed_keys(_many_changes(2000), b"count", str(tmp_path), in_memory=500))  # modules loaded first
    peaks = {}
    for n in (20_000, 160_000):
        tracemalloc.start()
        try:
            count = 0
            last = b""
            for base, _ in changed_keys(_many_changes(n), b"count", str(tmp_path), in_memory=4096):
                assert base > last
                last, count = base, count + 1
            peaks[n] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert count == n
    # 4,096 keys of ~40 bytes in a dict and a sorted list: about 1.5 MB; 160,000 keys held would
    # be 30 MB
    assert peaks[160_000] < 3 << 20 and peaks[160_000] < 1.5 * peaks[20_000], peaks
    assert os.listdir(tmp_path) == []
