"""Savepoint surgery on keyed functions' state: which states a function's savepoint files hold,
the re-keying of a renamed state, and the per-partition Spark job that rewrites a function's
state files without running any user code (removal and rename of states).

A keyed state ``name`` owns these entries of a partition file (layouts in
:mod:`spark_state.keys.keyed` and :mod:`spark_state.keys.system`)::

    [kg u16][len u8][name][len u32][key][suffix]          its data entries
    [0xFF][0x01][len u8][name][bucket u64][data key]      its TTL index (namespace = state name)
    [0xFF][0x02][len u8][name]                            its TTL format marker
    [0xFF][0x03][len u8][name]                            its schema record

A rename rewrites the name in each of them (the TTL index entry twice: its namespace and the
data key it names); values are unchanged (a schema record's value does not hold the name, a TTL
stamp is the value's head). Renamed keys sort elsewhere, so a rewrite task sorts the entries
through the external sort (:func:`~spark_state.engine.spill.external_sort`, on local disk) and
writes the file in key order with the savepoint's one state-file writer: memory stays bounded
whatever the partition's size.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession

from ...engine.spill import external_sort
from ...keys import keyed as K
from ...keys import system as syskeys
from ...keys.entries import is_entry_of_state
from ...keys.keygroup_prefix import KEY_GROUP
from ...ops import savepoint_format as F
from ...ops.state_files import read_record_entries, read_unlisted_entries, write_state_file
from ...spark.logs import OffsetEntry
from ...state.schema import StateSchema
from ...storage import open_storage
from ..errors import StateDataError
from ..location.savepoints import SavepointSource
from ..partition_jobs import each_partition

#: What each rewrite task returns (one row): its partition and its file's manifest entry.
REWRITE_SCHEMA = pa.schema([pa.field("partition", pa.int32()), *F.FILE_ENTRY_FIELDS])
REWRITE_DDL = f"partition int, {F.FILE_ENTRY_DDL}"


@dataclass(frozen=True)
class BaseEntries:
    """What a transform task starts from: partition files of a savepoint (checked against its
    manifest), or of an earlier step of the same transform (``chained_url``: the files it just
    wrote), without every entry of the states in ``replaced`` (UTF-8 names), and with the entries
    of each state ``old`` of ``renamed`` re-keyed under ``new`` (:func:`renamed_key`; the
    entries then leave key order, and the reader sorts them through a store)."""

    source: SavepointSource
    replaced: tuple[bytes, ...]
    chained_url: Optional[str] = None
    chained_options: Mapping[str, str] = field(default_factory=dict)
    renamed: tuple[tuple[bytes, bytes], ...] = ()
    #: entries whose key starts with one of these are dropped too (an operator state's)
    dropped_prefixes: tuple[bytes, ...] = ()

    def entries(self, partition: int, scratch_dir: Optional[str] = None) -> Iterator[tuple[bytes, bytes]]:
        """The partition's entries, in key order, read a record batch at a time (a remote file
        through a local copy in ``scratch_dir``, deleted when the entries end)."""
        if self.chained_url is None:
            found = self.source.entries(partition, scratch_dir)
        else:
            storage = open_storage(self.chained_url, dict(self.chained_options))
            found = read_unlisted_entries(storage, F.process_file(self.source.function, partition), scratch_dir)
        replaced = self.replaced
        prefixes = self.dropped_prefixes
        kept = ((k, v) for k, v in found
                if not any(is_entry_of_state(k, name) for name in replaced)
                and not (prefixes and k.startswith(prefixes)))
        if not self.renamed:
            return kept
        def rename(key: bytes) -> bytes:
            for old, new in self.renamed:
                key = renamed_key(key, old, new)
            return key

        return ((rename(k), v) for k, v in kept)


def renamed_key(key: bytes, old: bytes, new: bytes) -> bytes:
    """``key`` with keyed state ``old``'s name replaced by ``new`` (UTF-8) if it is one of
    ``old``'s entries (see the module docstring), else ``key`` unchanged."""
    if key[:1] == syskeys.SYSTEM_PREFIX:
        tag = key[1:2]
        if tag not in (syskeys.TTL_INDEX_TAG, syskeys.TTL_MARKER_TAG, syskeys.KEYED_SCHEMA_TAG) \
                or syskeys.name_of_named_key(key) != old:
            return key
        renamed = syskeys.named_key(tag, new, "state name")
        if tag != syskeys.TTL_INDEX_TAG:
            return renamed
        rest = key[syskeys.INDEX_HEADER_BYTES + len(old):]  # [bucket u64][data key]
        bucket = rest[:syskeys.BUCKET.size]
        return renamed + bucket + renamed_key(rest[syskeys.BUCKET.size:], old, new)
    if key[0] >= 0x80 or K.state_name_of(key) != old:  # operator state (0xFE), another state
        return key
    start = KEY_GROUP.size
    return key[:start] + K.name_part(new) + key[start + 1 + len(old):]


def keyed_state_names(source: SavepointSource) -> set[str]:
    """The keyed states a function's savepoint files record (:func:`keyed_state_records`' names)."""
    return set(keyed_state_records(source))


def keyed_state_records(source: SavepointSource) -> dict[str, StateSchema]:
    """The schema record of each keyed state a function's savepoint files record, by name (the
    union of every partition's records, the first partition's record of a state kept; a partition
    none of whose keys held a state has no record of it).

    Schema records are system keys, which sort last: each file is read from its end
    (:func:`~spark_state.ops.state_files.read_record_entries`)."""
    storage = open_storage(source.url, dict(source.storage_options))
    raw_records: dict[str, bytes] = {}
    low, high = syskeys.record_range(syskeys.KEYED_SCHEMA_TAG)
    for i in range(source.entry.parallelism):
        entries = read_record_entries(storage, source.manifest, F.process_file(source.function, i))
        for key, raw in entries:
            if low <= key < high:
                name = syskeys.name_of_record_key(key).decode("utf-8", "replace")
                raw_records.setdefault(name, raw)
    return {name: StateSchema.decode(raw, name) for name, raw in raw_records.items()}


def rewrite(spark: SparkSession, source: SavepointSource, base: BaseEntries, url: str,
            options: Mapping[str, str]) -> dict[int, F.FileEntry]:
    """Rewrite every partition file of ``source``'s function into the savepoint at ``url`` as
    ``base`` gives its entries (one Spark task per partition); returns the files written."""
    name, n = source.function, source.entry.parallelism
    opts = dict(options)

    def run(partition: int) -> Iterator[pa.RecordBatch]:
        return rewrite_partition(name, url, opts, base, partition)

    rows = each_partition(spark, n, run, REWRITE_DDL).collect()
    return {row.partition: F.file_entry_of_row(row) for row in rows}


def rewrite_partition(name: str, url: str, options: Mapping[str, str], base: BaseEntries,
                      partition: int) -> Iterator[pa.RecordBatch]:
    """One task of :func:`rewrite`: ``partition`` written by :func:`write_partition` with nothing
    added, its file's entry as one row."""
    written = write_partition(name, url, options, base, partition, ())
    yield pa.record_batch([pa.array([partition], pa.int32()), *F.file_entry_arrays(written)], schema=REWRITE_SCHEMA)


def write_partition(name: str, url: str, options: Mapping[str, str], base: BaseEntries, partition: int,
                    added: Iterable[tuple[bytes, bytes]]) -> F.FileEntry:
    """Partition ``partition``'s entries from ``base`` and ``added`` written as
    ``process/<name>/<partition>.arrow`` of the savepoint at ``url`` (:func:`write_sorted`)."""
    return write_sorted(url, options, F.process_file(name, partition),
                        lambda work: itertools.chain(base.entries(partition, work), added))


def write_sorted(url: str, options: Mapping[str, str], path: str,
                 entries: Callable[[str], Iterable[tuple[bytes, bytes]]]) -> F.FileEntry:
    """``entries(work)`` (in any order, a later entry of a key winning; ``work`` is a scratch
    directory of the executor for local copies, removed at the end) sorted by the external sort
    (:func:`~spark_state.engine.spill.external_sort`) and written as state file ``path`` of the
    savepoint at ``url``; returns its manifest entry."""
    work = tempfile.mkdtemp(prefix="spark-state-surgery-")
    try:
        return write_state_file(open_storage(url, dict(options)), path, external_sort(entries(work), work),
                                scratch_dir=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------ Spark's sources
def check_tick_source(manifest: F.SavepointManifest, sp_url: str, offsets: bytes, index: int, function: str) -> None:
    """Refuse to drop source ``index`` of a savepoint whose offset log (``offsets``: the entry of
    its batch) has no such source or holds there an offset that is not a tick source's (a
    number, or ``-``: none yet).

    Raises:
        StateDataError: naming the sources' count or the offset found.
    """
    entry = OffsetEntry.decode(manifest.batch_id, offsets, f"{sp_url}/{F.SPARK_DIR}/offsets/{manifest.batch_id}")
    lines = entry.source_lines
    if not 0 <= index < len(lines):
        raise StateDataError(f"tick_source={index} for {function!r}, but the savepoint's query has {len(lines)} "
                             f"sources (0..{len(lines) - 1})")
    line = lines[index].strip()
    if not (line == "-" or line.isdigit()):
        raise StateDataError(f"source {index} of the savepoint's query has offset {line!r}, not a tick source's (a "
                             f"number): it is another source, not the tick source of {function!r}")


def with_sources(path: str, data: bytes, inserted: Sequence[int]) -> tuple[str, bytes]:
    """Spark's file ``path`` (``spark/...``) of a savepoint as it is for the query with new sources
    at the indices ``inserted`` (ascending, in the new query's order; a new function's tick
    source): a ``-`` line (no offset yet: the source starts from its beginning) inserted there in
    an offset log entry, the metadata directories ``sources/<i>`` renumbered to the indices their
    sources now have; other files unchanged. The inverse of :func:`without_source`."""
    offsets, sources = f"{F.SPARK_DIR}/offsets/", f"{F.SPARK_DIR}/sources/"
    if path.startswith(offsets) and path[len(offsets):].isdigit():
        entry = OffsetEntry.decode(int(path[len(offsets):]), data, path)
        lines = list(entry.source_lines)
        for index in sorted(inserted):
            lines.insert(index, "-")
        return path, OffsetEntry(entry.batch_id, entry.version_line, entry.metadata, tuple(lines)).encode()
    if path.startswith(sources):
        number, _, rest = path[len(sources):].partition("/")
        if number.isdigit():
            return f"{sources}{renumbered_source(int(number), inserted)}/{rest}", data
    return path, data


def renumbered_source(old: int, inserted: Sequence[int]) -> int:
    """The index source ``old`` has once new sources take the indices ``inserted`` (of the new order)."""
    new = old
    for index in sorted(inserted):
        if index <= new:
            new += 1
    return new


def without_source(path: str, data: bytes, index: int) -> Optional[tuple[str, bytes]]:
    """Spark's file ``path`` (``spark/...``) of a savepoint as it is for the query without source
    ``index``: its line dropped from an offset log entry (one line per source, in the query's
    order), its metadata directory ``sources/<index>`` dropped (None) and those after it
    renumbered; other files unchanged."""
    offsets, sources = f"{F.SPARK_DIR}/offsets/", f"{F.SPARK_DIR}/sources/"
    if path.startswith(offsets) and path[len(offsets):].isdigit():
        entry = OffsetEntry.decode(int(path[len(offsets):]), data, path)
        lines = entry.source_lines[:index] + entry.source_lines[index + 1:]
        return path, OffsetEntry(entry.batch_id, entry.version_line, entry.metadata, lines).encode()
    if path.startswith(sources):
        number, _, rest = path[len(sources):].partition("/")
        if number.isdigit() and int(number) == index:
            return None
        if number.isdigit() and int(number) > index:
            return f"{sources}{int(number) - 1}/{rest}", data
    return path, data
