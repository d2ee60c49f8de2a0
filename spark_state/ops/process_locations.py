"""Where the operations find a query's keyed-function state (``keyed_process`` /
``checkpointed_process``).

Spark's checkpoint does not record these operators, so the tools look where the runtime
puts their state (see :mod:`spark_state.process.location`), in this order of precedence by
operator name -- the runtime's own (``state_location=`` over ``state_root=`` over the
default):

1. ``explicit`` (``--process-location NAME=URL``; Python ``process_locations={name: url}``):
   an operator given ``state_location=``;
2. ``root`` (``--process-root DIR``; ``process_root=``): every ``<root>/<query id>/<name>``,
   for a query run with ``state_root=`` or the conf :data:`~spark_state.process.location.ROOT_CONF`
   (``root`` on local disk; a given root holding none of the query's state is an error);
3. beside the checkpoint (the default): every ``<checkpoint>/spark-state/<name>``, listed
   through the checkpoint's own storage (local, S3 or HDFS);
4. the former default root, ``./spark-state/<query id>/<name>`` of the working directory,
   when ``root`` is None and that directory exists (a query that ran before the default
   moved beside the checkpoint keeps its state there until ``spark-state move-state``).

A location is one holding ``_operator.json``. Each :class:`ProcessLocation` says which rule
found it (:attr:`ProcessLocation.placement`): a restore places the state of the restored
query by it (see :mod:`.restore`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from ..storage import CheckpointStorage, open_storage
from ..process import location as L
from ..process.errors import StateLocationError
from .errors import ProcessStateNotFoundError, UnsupportedCheckpointError
from .storage_walk import list_subdirs

#: ProcessLocation.placement values
EXPLICIT, ROOT, CHECKPOINT, FORMER_DEFAULT = "explicit", "root", "checkpoint", "former-default"


@dataclass(frozen=True)
class ProcessLocation:
    """A keyed_process / checkpointed_process state location of the query."""

    name: str
    url: str
    kind: str
    max_parallelism: Optional[int]
    #: the root it was found under (``<root>/<query id>/<name>``), None otherwise
    under_root: Optional[str]
    storage_options: Mapping[str, str]
    #: which rule found it: EXPLICIT, ROOT, CHECKPOINT or FORMER_DEFAULT (module docstring)
    placement: str = EXPLICIT

    def storage(self) -> CheckpointStorage:
        return open_storage(self.url, dict(self.storage_options))


def default_process_root() -> str:
    """The former default root of keyed-function state: ``./spark-state`` of the working directory."""
    return os.path.abspath(L.DEFAULT_ROOT_DIR)


def beside_checkpoint(checkpoint: CheckpointStorage) -> CheckpointStorage:
    """``<checkpoint>/spark-state``: the directory of the default state locations."""
    return checkpoint.child(L.CHECKPOINT_DIR)


def find_process_locations(checkpoint: CheckpointStorage, query_id: str, root: Optional[str],
                           explicit: Mapping[str, str], storage_options: Mapping[str, str]) -> list[ProcessLocation]:
    """The query's process state locations, sorted by name (see the module docstring for
    where and in which order they are looked for). ``root``: None -- the former default root
    if it exists; ``""`` -- no root.

    Raises:
        ProcessStateNotFoundError: ``root`` was given and holds no state of the query (a wrong
            root, or a remote one, which cannot be listed).
    """
    found: dict[str, ProcessLocation] = {}
    for name, url in explicit.items():
        found[name] = _location(name, url, None, storage_options, EXPLICIT)
    if root:
        under_root = locations_under(root, query_id, storage_options)
        if not under_root:
            raise _nothing_under(root, query_id)
        for name, location in under_root.items():
            found.setdefault(name, location)
    for name, location in locations_beside(checkpoint, storage_options).items():
        found.setdefault(name, location)
    if root is None and os.path.isdir(default_process_root()):
        for name, location in locations_under(default_process_root(), query_id, storage_options,
                                              FORMER_DEFAULT).items():
            found.setdefault(name, location)
    return [found[n] for n in sorted(found)]


def locations_beside(checkpoint: CheckpointStorage, storage_options: Mapping[str, str]) -> dict[str, ProcessLocation]:
    """Every ``<checkpoint>/spark-state/<name>`` holding an ``_operator.json``."""
    base = beside_checkpoint(checkpoint)
    return {name: _location(name, base.full_url(name), None, storage_options, CHECKPOINT)
            for name in list_subdirs(base) if base.exists(f"{name}/{L.META_FILE}")}


def locations_under(root: str, query_id: str, storage_options: Mapping[str, str],
                    placement: str = ROOT) -> dict[str, ProcessLocation]:
    """Every ``<root>/<query id>/<name>`` holding an ``_operator.json`` (``root`` on local disk)."""
    base = os.path.join(_local_path(root), query_id)
    if not os.path.isdir(base):
        return {}
    return {name: _location(name, os.path.join(base, name), root, storage_options, placement)
            for name in sorted(os.listdir(base)) if os.path.isfile(os.path.join(base, name, L.META_FILE))}


def where_looked(checkpoint: CheckpointStorage, query_id: str, root: Optional[str],
                 explicit: Optional[Mapping[str, str]] = None) -> str:
    """For messages: the places :func:`find_process_locations` searched for this query -- the
    locations named (``explicit``), the root given, beside the checkpoint, and the former default
    root only where it holds a directory of this query (elsewhere it was not searched for it)."""
    places = [f"beside the checkpoint ({beside_checkpoint(checkpoint).url}/<name>)"]
    if explicit:
        places.insert(0, f"the locations named ({', '.join(f'{n}={u}' for n, u in sorted(explicit.items()))})")
    if root:
        places.insert(len(places) - 1,
                      f"under the process root {root} ({os.path.join(_local_path(root), query_id)}/<name>)")
    elif root is None:
        former = os.path.join(default_process_root(), query_id)
        if os.path.isdir(former):
            places.append(f"under the former default root ({former}/<name>)")
    return ", ".join(places[:-1]) + " and " + places[-1] if len(places) > 1 else places[0]


def _nothing_under(root: str, query_id: str) -> ProcessStateNotFoundError:
    where = os.path.join(_local_path(root), query_id)
    remote = "://" in root and not root.startswith("file://")
    return ProcessStateNotFoundError(
        f"the process root {root} holds no keyed_process/checkpointed_process state of query {query_id}: "
        + ("process roots are listed on local disk only; name each remote state location with "
           "--process-location NAME=URL (Python: process_locations={name: url})" if remote else
           f"no {where}/<name>/{L.META_FILE}. Pass the root the query's state_root= or the conf {L.ROOT_CONF} "
           "named (its state is at <root>/<query id>/<name>), or name each state location with "
           "--process-location NAME=URL (Python: process_locations={name: url}); state kept beside the "
           f"checkpoint (<checkpoint>/{L.CHECKPOINT_DIR}/<name>, the default) is found without either"))


def _local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _location(name: str, url: str, root: Optional[str], options: Mapping[str, str], placement: str) -> ProcessLocation:
    try:
        meta = L.read_meta(open_storage(url, dict(options)))
    except StateLocationError as exc:
        raise UnsupportedCheckpointError(f"the process operator {name!r}: {exc}") from None
    return ProcessLocation(name, url, str(meta.get("kind")), meta.get("max_parallelism"), root, dict(options),
                           placement)
