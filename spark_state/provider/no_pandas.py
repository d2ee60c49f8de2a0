"""Keep pandas out of the provider's Python worker.

pyarrow imports pandas the first time it converts a Python object (``pa.scalar``, ``pa.array``
of a list: it checks whether the object is a pandas one), whether or not pandas is used. In a
provider worker that import is 40% of its start-up (about 0.2 s of CPU, on the executor's
cores, during the first micro-batch) and 35 MB of its memory, for nothing: no code the worker
runs uses pandas. :func:`install` makes ``import pandas`` fail in this process, which pyarrow
takes as "pandas is not installed". Only ``spark_state.provider.worker`` calls it, first thing
in its ``main()``; the modules imported before that (the ``spark_state`` package, as ``python -m``
imports it) must not convert Python objects at import time, which
``tests/unit/test_worker_imports.py`` checks. pyspark's own Python workers (UDFs,
``keyed_process``) are untouched.
"""

from __future__ import annotations

import importlib.abc
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Optional, Sequence

BLOCKED = "pandas"


class _BlockPandas(importlib.abc.MetaPathFinder):
    """A meta path finder that refuses ``pandas`` with ModuleNotFoundError (and so its
    submodules, whose import starts with it). A pandas loaded before :func:`install` keeps working."""

    def find_spec(self, name: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        if name == BLOCKED:
            raise ModuleNotFoundError(
                f"No module named {name!r}: spark-state's provider worker does not load pandas "
                "(spark_state.provider.no_pandas)", name=name)
        return None


def install() -> None:
    """Refuse pandas in this process from now on (idempotent). Call before importing pyarrow users."""
    if not any(isinstance(f, _BlockPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _BlockPandas())
