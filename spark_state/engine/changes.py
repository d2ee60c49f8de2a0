"""The changes committed versions of a store made, from their changelogs.

Every committed version ``v`` has a changelog: the keys the epoch that produced it put or
deleted, the last write per key (:mod:`spark_state.checkpoint.changelog`). A version written by
an operations tool (restore, rescale, erasure: its run id starts with
:data:`~spark_state.constants.TOOL_RUN_PREFIX`) is imported whole -- a snapshot and an empty
changelog -- so it records no changes; :func:`committed_changes` refuses it rather than report
"nothing changed".

Change feeds read this: the keyed functions' (:mod:`spark_state.state_data.readers.change_feed`) and the
provider's, for Spark's ``statestore`` reader with ``readChangeFeed``
(:meth:`spark_state.provider.service.StoreService.changes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

from ..arrow_chunks import batch_entries
from .. import constants as C
from ..checkpoint import changelog
from ..errors import SparkStateError
from ..storage.local_copy import local_file
from .store import VersionedStore


class ToolWrittenVersionError(SparkStateError):
    """A change feed covers a version an operations tool wrote (it records no changes)."""


def is_tool_run(run_id: Optional[str]) -> bool:
    """Whether a version's run id is an operations tool's (restore, rescale, erasure, ...)."""
    return bool(run_id) and str(run_id).startswith(C.TOOL_RUN_PREFIX)


@dataclass(frozen=True)
class VersionChanges:
    version: int
    #: ``(key, new value)``, the value None for a delete, in the changelog's (key) order; read from
    #: the changelog a record batch at a time as it is iterated
    changes: Iterator[tuple[bytes, Optional[bytes]]]


def committed_changes(store: VersionedStore, start: int, end: int) -> Iterator[VersionChanges]:
    """For each version ``start..end`` (``start >= 1``): load it into ``store`` (which replays its
    changelog on the version before) and yield its changes. Iterate each version's changes
    before asking for the next: ``store`` then holds that version.

    :raises ToolWrittenVersionError: a version in the range was written by an operations tool.
    """
    if start < 1 or end < start:
        raise ValueError(f"versions {start}..{end}: a change range starts at version 1 or later and is not empty")
    store.load(start - 1)
    for version in range(start, end + 1):
        store.load(version)
        manifest = store.manifest
        assert manifest is not None  # a loaded version >= 1 has one
        if is_tool_run(manifest.run_id):
            raise ToolWrittenVersionError(
                f"version {version} of {store.storage.url} was written by an operations tool (restore, rescale or "
                "erasure), which records no changes: start the change feed after it")
        yield VersionChanges(version, _changes_of(store, manifest.changelog.path, version))


def _changes_of(store: VersionedStore, path: str, version: int) -> Iterator[tuple[bytes, Optional[bytes]]]:
    """The rows of one changelog, memory-mapped from a local copy (deleted once they are read)."""
    with local_file(store.storage, path) as local:
        for keys, values in changelog.read_file(local, store.storage.full_url(path), version):
            yield from batch_entries(keys, values)
