"""The part of a changed savepoint that is not changed: the source savepoint's files copied into
the target, and the new manifest that will list them (the one copy step of
:meth:`~.transform.SavepointTransform.write` and of the data source's writer,
:mod:`..datasource.writer`).

The target receives every file of the source's manifest except those the change rewrites:
a rewritten function's state files (``process/<name>/*.arrow``; its other files, such as
operator metadata, are copied), a replaced Spark store's files (``state/<op>/<store>/``), and
every file of a removed function; Spark's files are edited when a tick source is dropped
(:func:`~.keyed_state_surgery.without_source`) or new ones are inserted
(:func:`~.keyed_state_surgery.with_sources`). Each file is checked against the manifest's
size and CRC-32 as it is copied. The manifest returned lists the copied files; the caller adds
the files it writes and writes the manifest last, so that a target without one is no savepoint.
:func:`source_and_target` opens both sides for such a change.
"""

from __future__ import annotations

import time
from typing import Collection, Mapping, Optional, Sequence

from ...ops import savepoint_format as F
from ...ops.savepoint import check_empty_target
from ...ops.savepoint_manifest import read_manifest
from ...ops.state_files import copy_verified, read_verified, write_small_file
from ...storage import CheckpointStorage, open_storage
from .keyed_state_surgery import with_sources, without_source


def source_and_target(savepoint: str, options: Mapping[str, str], target: str,
                      target_options: Optional[Mapping[str, str]]
                      ) -> tuple[CheckpointStorage, F.SavepointManifest, CheckpointStorage, dict[str, str]]:
    """The savepoint a change reads (with its manifest) and the new one it writes, refused unless
    new or empty (:func:`~spark_state.ops.savepoint.check_empty_target`), with the options the
    target is written with: ``target_options`` when given, else the source's."""
    source = open_storage(savepoint, dict(options))
    manifest = read_manifest(source)
    out_options = dict(options if target_options is None else target_options)
    out = open_storage(target, out_options)
    check_empty_target(out, target)
    return source, manifest, out, out_options


def copy_unchanged(source: CheckpointStorage, manifest: F.SavepointManifest, out: CheckpointStorage, *,
                   rewritten: Collection[str] = (), spark_replaced: tuple[str, ...] = (),
                   removed: Collection[str] = (), dropped_source: Optional[int] = None,
                   inserted_sources: Sequence[int] = ()) -> F.SavepointManifest:
    """Copy the files of the savepoint ``source`` (its ``manifest``) that stay as they are into
    ``out``; returns the new manifest listing them (see the module docstring). ``rewritten``:
    functions whose state files the caller writes; ``spark_replaced``: path prefixes
    (``state/<op>/<store>/``) of the Spark stores it writes; ``removed``: functions dropped."""
    new = F.SavepointManifest(**{**manifest.__dict__, "files": [], "created_ms": int(time.time() * 1000),
                                 "format_version": F.FORMAT_VERSION,
                                 "process": [p for p in manifest.process if p.name not in removed]})
    for entry in manifest.files:
        if any(entry.path.startswith(f"{F.PROCESS_DIR}/{name}/") for name in removed):
            continue
        if any(entry.path.startswith(f"{F.PROCESS_DIR}/{name}/") and entry.path.endswith(".arrow")
               for name in rewritten):
            continue
        if spark_replaced and entry.path.startswith(spark_replaced):
            continue
        if dropped_source is not None and entry.path.startswith(F.SPARK_DIR + "/"):
            edited = without_source(entry.path, read_verified(source, manifest, entry.path), dropped_source)
            if edited is not None:
                new.files.append(write_small_file(out, *edited))
            continue
        if inserted_sources and entry.path.startswith(F.SPARK_DIR + "/"):
            data = read_verified(source, manifest, entry.path)
            new.files.append(write_small_file(out, *with_sources(entry.path, data, inserted_sources)))
            continue
        copy_verified(source, manifest, entry.path, out)  # a state file streams through a local copy
        new.files.append(entry)
    return new
