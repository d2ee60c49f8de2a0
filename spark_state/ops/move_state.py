"""Move a query's keyed-function state from the former default location beside its checkpoint.

``keyed_process`` / ``checkpointed_process`` keep their state by default beside the query's
checkpoint, ``<checkpoint>/spark-state/<name>``; earlier releases kept it at
``./spark-state/<query id>/<name>`` of the driver's working directory (the *former default*),
where a query that ran then keeps using it (the runtime falls back to it while the
checkpoint holds no state of the operator). :func:`move_state` moves every operator's state
of the query from there (or from ``<process_root>/<query id>/<name>``) beside the checkpoint,
one operator at a time:

1. refuse a running query (:func:`~.rewrite.check_stopped`: a batch with offsets but no
   commit; and :func:`~.rewrite.check_live_stores`: a store holding a version past the last
   committed batch's) and any
   operator whose destination already holds state (``_operator.json``), before anything is
   written;
2. copy every file (streaming), ``_operator.json`` last: the runtime takes a location for
   the operator's only once it holds that file, so until the copy is complete the query still
   uses the source, and a move that was interrupted is simply run again (the partial copy is
   overwritten);
3. verify: every file's size, and at the last committed batch the layout holding it, the
   committed manifest of each of its partition stores and every file that manifest needs;
4. delete the source, ``_operator.json`` first (so that a deletion cut short leaves nothing
   the runtime or the tools would take for state), then the emptied directories.

The restarted query (same options, default location) then finds the state beside its
checkpoint. Stop the query before moving; a query idle between batches leaves no trace a
reader can see, so the checks cannot catch it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..checkpoint.retention import needed_files, read_manifest
from ..checkpoint.runs import RunContext, RunRegistry
from ..process import location as L
from ..storage import CheckpointStorage, open_storage
from .checkpoint_reader import SparkCheckpoint
from .errors import MoveVerificationError, ProcessStateNotFoundError, TargetExistsError
from .process_locations import (FORMER_DEFAULT, ProcessLocation, beside_checkpoint, default_process_root,
                                locations_under)
from .progress import Progress
from .rewrite import check_live_stores, check_stopped
from .state_io import process_layout
from .storage_walk import copy_file, remove_empty_dirs, walk_files


@dataclass
class MoveStateResult:
    checkpoint: str
    query_id: str
    #: one entry per operator: name, source, destination, files, bytes
    moved: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def move_state(checkpoint: str, *, process_root: Optional[str] = None,
               storage_options: Optional[dict[str, str]] = None, progress: bool = True) -> MoveStateResult:
    """Move the query's process state from ``<process_root>/<query id>/<name>`` (default: the
    former default root ``./spark-state``; on local disk) to ``<checkpoint>/spark-state/<name>``
    (see the module docstring)."""
    started = time.perf_counter()
    ckpt = SparkCheckpoint(checkpoint, storage_options)
    query_id = ckpt.query_id()
    root = process_root or default_process_root()
    sources = locations_under(root, query_id, storage_options or {}, FORMER_DEFAULT)
    if not sources:
        raise ProcessStateNotFoundError(
            f"no keyed_process/checkpointed_process state of query {query_id} to move: no "
            f"{root.rstrip('/')}/{query_id}/<name>/{L.META_FILE}"
            + ("" if process_root else " (the former default root; pass --process-root DIR where the query ran "
               "from another working directory, DIR being that directory's spark-state)"))
    last = ckpt.last_committed()
    check_stopped(ckpt, -1 if last is None else last, resume_marker=False, operation="move the state",
                  force_option=False)
    check_live_stores(ckpt, [], 0, sources.values(), last, force_option=False)
    beside = beside_checkpoint(ckpt.storage)
    for loc in sources.values():
        if beside.exists(f"{loc.name}/{L.META_FILE}"):
            raise TargetExistsError(
                f"{beside.full_url(loc.name)} already holds state of {loc.name!r}: the query uses it, not the state at "
                f"{loc.url}. Nothing was moved; delete the one that is not wanted")
    result = MoveStateResult(ckpt.url, query_id)
    bar = Progress("move-state", unit="B", enabled=progress)
    try:
        for name in sorted(sources):
            result.moved.append(_move(sources[name], beside.child(name), last, bar))
    finally:
        bar.close()
    remove_empty_dirs(open_storage(os.path.join(root, query_id)))  # <root>/<query id>, when nothing is left
    result.seconds = round(time.perf_counter() - started, 3)
    return result


def _move(loc: ProcessLocation, target: CheckpointStorage, last: Optional[int], bar: Progress) -> dict[str, Any]:
    source = loc.storage()
    files = [f for f in walk_files(source) if f != L.META_FILE] + [L.META_FILE]
    sizes = {f: source.size(f) for f in files}
    bar.set_description(f"move-state {loc.name}")
    for path in files:
        copy_file(source, target, path)
        bar.update(sizes[path])
    _verify(source, target, sizes, last)
    source.delete(L.META_FILE)
    source.delete_many([f for f in files if f != L.META_FILE] + list(walk_files(source, temp_files=True)))
    remove_empty_dirs(source)
    return {"name": loc.name, "source": loc.url, "destination": target.url, "files": len(files),
            "bytes": sum(sizes.values())}


def _verify(source: CheckpointStorage, target: CheckpointStorage, sizes: dict[str, int], last: Optional[int]) -> None:
    for path, size in sizes.items():
        copied = target.size(path) if target.exists(path) else None
        if copied != size:
            raise MoveVerificationError(
                f"{target.full_url(path)} has {copied} bytes, its source {source.full_url(path)} {size}: the copy is "
                "incomplete; the source was kept. Run move-state again")
    if last is None:
        return
    version = last + 1
    layout = process_layout(target, version)
    if layout != process_layout(source, version):
        raise MoveVerificationError(f"{target.url}: the copy holds batch version {version} in another layout than "
                                    f"{source.url}; the source was kept. Run move-state again")
    runs = RunContext(RunRegistry(target), None)
    runs.refresh()
    for i in range(layout.parallelism):
        rank = L.valid_rank(target, layout, i, version, runs)
        assert rank is not None, "process_layout chose a layout whose every partition holds the version"
        store = target.child(layout.store_path(i))
        manifest = read_manifest(store, layout.store_version(version), rank)
        missing = [p for p in sorted(needed_files(store, [manifest])) if not store.exists(p)]
        if missing:
            raise MoveVerificationError(f"{store.full_url(missing[0])} is missing from the copy (needed by batch "
                                        f"version {version}); the source was kept. Run move-state again")
