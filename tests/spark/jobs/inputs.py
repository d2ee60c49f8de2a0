"""Input files of the job scripts: JSON lines of keys, one file per micro-batch."""

from __future__ import annotations

import collections
import json
import os


def write_key_batches(input_dir: str, batches: int, rows: int, keys: int, step: int) -> collections.Counter:
    """``batches`` files ``b000.json``... of ``rows`` lines ``{"k": key}`` each, key ``(b * step + i * 7)
    % keys`` for row ``i`` of batch ``b``; modification times 10 s apart in batch order (the file source
    reads files in that order). Returns how often each key was written."""
    os.makedirs(input_dir)
    expected: collections.Counter = collections.Counter()
    for b in range(batches):
        path = os.path.join(input_dir, f"b{b:03d}.json")
        with open(path, "w") as f:
            for i in range(rows):
                key = (b * step + i * 7) % keys
                expected[key] += 1
                f.write(json.dumps({"k": key}) + "\n")
        os.utime(path, (1_700_000_000 + 10 * b,) * 2)
    return expected
