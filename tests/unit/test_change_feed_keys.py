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
