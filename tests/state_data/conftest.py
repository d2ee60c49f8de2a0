"""The state-as-data tests reuse the streaming harness of ``tests/spark`` and the functions of
``tests/process``."""

from __future__ import annotations

import os
import sys

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("spark", "process"):
    path = os.path.join(_TESTS, sub)
    if path not in sys.path:
        sys.path.insert(0, path)
