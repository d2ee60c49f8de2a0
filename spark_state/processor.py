"""Deprecated: ``spark_state.processor`` is :mod:`spark_state.state_data` (renamed so that it is
not confused with :mod:`spark_state.process`, the keyed functions' runtime); it goes in the next
release. Importing it, or any ``spark_state.processor.<module>``, warns and gives the renamed
module itself (one module object, so classes and errors stay the same), ``keys`` being
``key_columns``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Optional, Sequence

from .deprecation import warn_renamed

_OLD, _NEW = __name__, "spark_state.state_data"
#: Submodules renamed beside the package.
_MOVED = {"keys": "key_columns"}


def _new_name(fullname: str) -> str:
    sub = fullname[len(_OLD) + 1:]
    return f"{_NEW}.{_MOVED.get(sub, sub)}"


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``spark_state.processor.<module>`` as the renamed module, warning once per import."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if not fullname.startswith(_OLD + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _new_name(spec.name)
        warn_renamed(spec.name, new, stacklevel=8)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The renamed module ran when it was imported."""


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
warn_renamed(_OLD, _NEW, stacklevel=3)
sys.modules[_OLD] = importlib.import_module(_NEW)
