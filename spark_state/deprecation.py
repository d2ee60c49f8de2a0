"""Renamed public names keep their old spelling for one release: the old one still works, and
warns once per call site with the new name (the command line's counterpart is
:func:`spark_state.cli.arguments.deprecated_alias`).

:class:`SparkStateDeprecationWarning` is a ``FutureWarning``, which Python shows by default: the
people who wrote the old name are the users of the library, not its developers.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, TypeVar

__all__ = ["SparkStateDeprecationWarning", "renamed_arguments", "warn_renamed"]

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
