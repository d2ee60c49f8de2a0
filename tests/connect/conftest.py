"""The Connect tests reuse the functions and models of ``tests/process`` and the streaming
harness of ``tests/spark``."""

from __future__ import annotations

import os
import sys

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _sub in ("spark", "process"):
    _path = os.path.join(_TESTS, _sub)
    if _path not in sys.path:
        sys.path.insert(0, _path)
