"""Errors of the state-as-data tools (``spark_state.state_data``), under the operations tools' root.

Every message names the checkpoint, the function, the state or the key it is about, and what
to do. The command line prints ``error: <message>`` and exits with status 1.
"""

from __future__ import annotations

from ..ops.errors import OpsError


class StateDataError(OpsError):
    """Base class of the errors of lookups and state readers."""


class UnknownStateError(StateDataError):
    """The function or state named is not in the checkpoint (the message lists what is)."""


class KeyMismatchError(StateDataError):
    """The key given does not fit the function's recorded key columns, or they are not recorded."""


class UnreadableStateError(StateDataError):
    """The state's values cannot be decoded here: pickled values without ``allow_pickle``, or a
    custom serializer that cannot be imported."""


class BootstrapError(StateDataError):
    """A bootstrap cannot be written as asked: a streaming history, a function that is not a
    keyed function, a missing event-time column, a wrong source count."""
