"""Sample 32-bit hashes for the key-group, Spark-hash and provider-key tests: the edges of a
Java int, then seeded random ones."""

from __future__ import annotations

import random

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def random_hashes(n: int = 3000, seed: int = 7) -> list[int]:
    """The int32 edges, then ``n`` random hashes (deterministic for a ``seed``)."""
    rng = random.Random(seed)
    extremes = [INT_MIN, INT_MIN + 1, -129, -128, -1, 0, 1, 127, 128, INT_MAX - 1, INT_MAX]
    return extremes + [rng.randint(INT_MIN, INT_MAX) for _ in range(n)]
