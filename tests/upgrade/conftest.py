"""The upgrade tests reuse the streaming harness of ``tests/spark``."""

from __future__ import annotations

import os
import sys

_SPARK_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark")
if _SPARK_TESTS not in sys.path:
    sys.path.insert(0, _SPARK_TESTS)
