"""Renamed public names keep their old spelling for one release: the old one still works, and
warns once per call site with the new name (the command line's counterpart is
:func:`spark_state.cli.arguments.deprecated_alias`).

:class:`SparkStateDeprecationWarning` is a ``FutureWarning``, which Python shows by default: the
people who wrote the old name are the users of the library, not its developers.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any, Callable, Optional, Sequence, TypeVar

__all__ = ["SparkStateDeprecationWarning", "alias_modules", "renamed_arguments", "warn_renamed"]

F = TypeVar("F", bound=Callable[..., Any])


class SparkStateDeprecationWarning(FutureWarning):
    """A public name was renamed; the old one goes in the next release."""


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated, naming ``new``."""
    warnings.warn(f"{old} is deprecated and goes in the next release; use {new}", SparkStateDeprecationWarning,
                  stacklevel=stacklevel)


def renamed_arguments(**renames: str) -> Callable[[F], F]:
    """Decorate a function whose keyword arguments ``old=`` were renamed ``renames[old]``: a call
    with the old name warns and passes the value under the new one; giving both is a
    ``TypeError`` naming both."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__qualname__}() got both {old}= and {new}=: {old}= is the "
                                        f"deprecated name of {new}=, give {new}= only")
                    warn_renamed(f"{fn.__qualname__}({old}=)", f"{new}=")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


class _ModuleAliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a renamed module under its former name: the import warns with the new name and
    gives the module itself (one module object, so classes and errors stay the same)."""

    def __init__(self) -> None:
        self.resolvers: list[Callable[[str], Optional[str]]] = []

    def _new_name(self, fullname: str) -> Optional[str]:
        for resolve in self.resolvers:
            new = resolve(fullname)
            if new is not None:
                return new
        return None

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        return importlib.machinery.ModuleSpec(fullname, self) if self._new_name(fullname) else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self._new_name(spec.name)
        assert new is not None
        warn_renamed(spec.name, new, stacklevel=8)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The renamed module ran when it was imported."""


_ALIASES = next((f for f in sys.meta_path if type(f).__name__ == "_ModuleAliases"), None) or _ModuleAliases()
if _ALIASES not in sys.meta_path:
    sys.meta_path.insert(0, _ALIASES)


def alias_modules(resolve: Callable[[str], Optional[str]]) -> None:
    """Import modules under former names: ``resolve(name)`` is the renamed module's name, or
    None for a name that is not a former one."""
    _ALIASES.resolvers.append(resolve)  # type: ignore[attr-defined]
