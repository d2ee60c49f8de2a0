"""Errors of the operations tools (``spark_state.ops``), under the project's root error.

Every message names what it is about (the checkpoint, the file, the operator, the option)
and what to do. The command line prints ``error: <message>`` and exits with status 1.
"""

from __future__ import annotations

from ..errors import SparkStateError


class OpsError(SparkStateError):
    """Base class of the errors of inspect, savepoint, restore, rescale, migrate and move-state."""


class NotACheckpointError(OpsError):
    """The path is not a Spark streaming checkpoint (no ``offsets/``, or no ``metadata``)."""


class NoCommittedBatchError(OpsError):
    """The checkpoint has no committed batch (or not the one asked for)."""


class QueryRunningError(OpsError):
    """The operation needs a stopped query, and the checkpoint shows one running."""


class SavepointError(OpsError):
    """A savepoint is missing, partial, corrupt, or of a format this release cannot read."""


class UnsupportedCheckpointError(OpsError):
    """The checkpoint uses something this release cannot operate on (an operator, a
    provider, a format); the message says what and the way out."""


class TargetExistsError(OpsError):
    """The target directory of restore / savepoint / migrate already has content."""


class TargetInsideSourceError(OpsError):
    """The target directory of an operation is its source (the savepoint directory is the
    checkpoint, or inside it, or holds it)."""


class ProcessStateNotFoundError(OpsError):
    """``keyed_process`` / ``checkpointed_process`` state the operation needs was not found
    where it was told to look (or nowhere, for a query that has no other state)."""


class RetentionRaceError(OpsError):
    """A file of the batch being copied disappeared (retention of a running query deleted
    it) even after retrying at newer committed batches."""


class MoveVerificationError(OpsError):
    """move-state's copy of a state location differs from its source (the source is kept)."""
