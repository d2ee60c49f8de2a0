"""Errors of the process runtime (``keyed_process`` / ``checkpointed_process``).

Each message names what is wrong and what to do; all derive from
:class:`~spark_state.errors.SparkStateError`.
"""

from __future__ import annotations

from ..errors import ConfigError, SparkStateError


class ProcessDefinitionError(ConfigError):
    """A ``keyed_process`` / ``checkpointed_process`` call cannot be planned (bad key column,
    unsupported key type, bad option)."""


class StateLocationError(SparkStateError):
    """The state location cannot be used: unreachable, not writable, or it holds state of
    another kind of operator."""


def misrouted_row(key: object, key_group: int, partition: int, first: int, last: int) -> StateLocationError:
    """The error for a row whose key group ``key_group`` is outside ``first..last``, the key
    groups partition ``partition`` owns (the runners keep the range check inline: per key)."""
    return StateLocationError(
        f"row with key {key!r} (key group {key_group}) reached partition {partition}, which "
        f"owns key groups {first}..{last}: the query's routing does not match its state")


class MaxParallelismMismatchError(StateLocationError):
    """The state was created with another max parallelism (number of key groups)."""


class StateVersionMissingError(StateLocationError):
    """No layout of the state location holds the version a batch needs."""


class OutputSchemaError(SparkStateError, ValueError):
    """A row the function produced does not fit ``output_schema``."""


class NotInStreamingQueryError(SparkStateError, RuntimeError):
    """The operator ran outside a streaming micro-batch (no ``streaming.sql.batchId``)."""


class BatchTimeMismatchError(SparkStateError, RuntimeError):
    """A task's batch id (``streaming.sql.batchId``) has no entry in the query's offset log,
    which is readable: the function would run on a time Spark does not know."""
