"""Errors of keyed and operator state about what a state holds: its schema and its bytes.

All derive from :class:`~spark_state.errors.SparkStateError`. A message names the state,
what it was written as and what it is read as, why that does not work, and what to do.
"""

from __future__ import annotations

from ..errors import SparkStateError

#: The ways out of an incompatible change, in every message that refuses one.
FIXES = ("keep the old descriptor; or give the new state a new name (the old state stays "
         "behind, unread); or migrate by hand: in one run, read the old state under its old "
         "descriptor and write a new state (another name) with the new type")


class StateSchemaError(SparkStateError):
    """Base of the schema evolution errors."""


class StateSchemaIncompatibleError(StateSchemaError):
    """A state's descriptor changed in a way its stored bytes cannot follow.

    Raised when the state is registered (``open`` / ``initialize_state``), before the
    batch processes anything; the task fails and nothing of the batch is committed.

    Attributes: ``state`` (name), ``old`` and ``new`` (descriptions of kind and type),
    ``reason``.
    """

    def __init__(self, state: str, old: str, new: str, reason: str) -> None:
        self.state, self.old, self.new, self.reason = state, old, new, reason
        super().__init__(
            f"state {state!r} cannot be restored: it was written as {old} and is now "
            f"declared as {new}: {reason}. Nothing was written; the stored state is "
            f"unchanged. To fix: {FIXES}")


class StateMigrationAbortedError(SparkStateError):
    """A schema migration failed after it had staged part of its rewrite (a conversion that
    passed the migration's check failed when repeated). Deliberately not a
    :class:`StateSchemaError`: nothing may catch it and go on, the epoch must fail."""


class StateSchemaConflictError(StateSchemaError):
    """The partitions being merged by a rescale recorded different schemas for a state.

    Happens only if a state changed type while some partitions had not registered it
    since (it is registered outside ``open``/``initialize_state``, so partitions without
    rows skipped it): their entries are still in the old layout.
    """

    def __init__(self, state: str, first: str, second: str) -> None:
        self.state = state
        super().__init__(
            f"cannot rescale state {state!r}: the partitions being merged recorded different "
            f"schemas for it ({first} and {second}), because it changed type while some "
            "partitions had not registered it since. Register the state in open() (keyed) or "
            "initialize_state() (operator), run one batch at the previous parallelism, so every "
            "partition migrates it, then rescale")


class StateSchemaRecordError(StateSchemaError):
    """A stored schema record cannot be read (corrupt, or written by a newer release)."""


class StateDecodeError(StateSchemaError):
    """Stored bytes of a state do not decode with its descriptor's serializer.

    With schema records this means state written by a release without them (or by hand)
    under another type; the message names the state and the serializer.
    """

    def __init__(self, state: str, serializer: str, cause: BaseException) -> None:
        self.state = state
        super().__init__(
            f"state {state!r}: a stored value does not decode as {serializer} "
            f"({type(cause).__name__}: {cause}). The state was probably written with another "
            f"type or serializer. To fix: {FIXES}")


class StateValueError(SparkStateError, TypeError, ValueError):
    """A value given to a state (``update``, ``add``, ``put``) does not fit the type its
    descriptor declares: raised by that call, before anything is stored, naming the state,
    its declared type and the value. A ``TypeError`` and a ``ValueError`` (what serializers
    raise for a wrong type or an unrepresentable value); the serializer's error is the cause.

    Attributes: ``state`` (name), ``declared`` (the declared type), ``value``.
    """

    def __init__(self, state: str, kind: str, declared: str, origin: str, value: object,
                 cause: BaseException, what: str = "value") -> None:
        self.state, self.declared, self.value = state, declared, value
        super().__init__(
            f"{kind} state {state!r} holds {what}s of type {declared}, not {type(value).__name__} "
            f"{_short(value)} ({origin}; {type(cause).__name__}: {cause})")


def _short(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
