"""The canonical savepoint format: a pure codec (no Spark, no engine), and its byte layout.

A savepoint is a directory (local, ``s3://`` or ``hdfs://``), self-contained and
backend-independent: it names no file outside itself, and its state files hold the logical
content of each store, whichever backend (rocksdb, hashmap) or provider wrote it::

    savepoint.json                    the manifest, written LAST: a savepoint without it is
                                      partial and is refused
    spark/metadata                    copies of Spark's checkpoint files needed to restart:
    spark/offsets/<b>                   offset and commit log entries of batches <= the
    spark/commits/<b>                   savepoint's batch, the sources' logs (entries of
    spark/sources/<i>/<name>            batches <= it, and non-batch files), operator metadata
    spark/state/<op>/_metadata/metadata and every store's schema file (partition 0)
    spark/state/<op>/0[/<store>]/_metadata/schema
    state/<op>/<store>/<p>.arrow      provider state: store <store> of operator <op>, partition p
    process/<name>/<i>.arrow          keyed_process / checkpointed_process state: partition i of
                                      the layout that held the batch

**State files** are Arrow IPC *files* (random-access format, ``ARROW1`` magic) with schema
``key: binary not null, value: binary not null`` and schema metadata
``spark_state.savepoint = "1"``; record batches of at most 65,536 rows, a batch ending early at
the row that brings its keys and values to 32 MiB (readers take any batch sizes); a file without
rows holds one empty batch; rows in ascending unsigned-bytewise key order. Rows are the store's
entries exactly as the engine holds them:

* provider data keys ``[key group u16 BE][Spark hash i32 BE][key UnsafeRow]`` (session windows
  and join ``keyWithIndexToValue`` stores: see ``jvm-shim/.../KeyCodec.scala``), values the
  value ``UnsafeRow``, or ``[last access ms i64 BE][UnsafeRow]`` when the store's values are
  TTL-stamped: TTL stamps are kept as stored;
* keyed state keys ``[key group u16 BE][...]`` (``spark_state/state/keys.py``);
* system keys ``[0xFF][tag]...`` (TTL expiry index, TTL format markers, schema records;
  ``spark_state/constants.py``), which re-split by the data key they name or go to every
  partition (see :mod:`.rescale`).

Files are per partition, not per key group: the provider's key groups number 32,768 (its
max parallelism), which would make tens of thousands of tiny files, and every row carries its
Spark hash and key group anyway, so a restore re-splits rows from partition files at any
count in one vectorised pass.

**The manifest** (``savepoint.json``, UTF-8 JSON)::

    {"kind": "spark-state/savepoint", "format_version": 2, "created_ms": ..., "spark_state": "0.1.0",
     "source": "<checkpoint url>", "query_id": "...", "batch_id": N, "state_version": N + 1,
     "provider_class": "...", "partitions": 3,
     "operators": [{"id": 0, "name": "stateStoreSave", "partitions": 3,
                    "stores": [{"name": "default", "num_cols_prefix_key": 0,
                                "key_schema": {...}, "value_schema": {...}}]}],
     "process": [{"name": "RunningCount", "kind": "keyed", "max_parallelism": 128,
                  "parallelism": 4, "location": "<url>", "under_root": "<root>" | null,
                  "placement": "checkpoint" | "former-default" | "root" | "explicit",
                  "key": {"columns": ["user"], "types": ["string"]} | null}],
     "files": [{"path": "state/0/default/0.arrow", "size": 1234, "crc32": 305419896, "rows": 10,
                "keys": 9}, {"path": "spark/offsets/3", "size": ..., "crc32": ...}, ...]}

``files`` lists every file with its size and CRC-32 (zlib polynomial); ``rows`` counts every
entry of a state file and ``keys`` only the data entries (system keys excluded). A reader
checks the size and CRC-32 of a file before it uses it and names the file if they differ.

**Bounded memory.** A state file may hold a partition of tens of millions of entries (GBs), so
none is ever held whole: :func:`write_entries` writes one record batch at a time to a file
object, and :func:`read_batches` / :func:`read_entries` read a local file memory-mapped, one
batch at a time. This module is the pure codec (local files and file objects only); moving
state files to and from checkpoint storage, with their sizes and CRC-32s, is
:mod:`.state_files`.

Size: the docstring is the format's specification (the directory, the state files' bytes, the
manifest), which every reader and writer of a savepoint follows.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol

import pyarrow as pa

from ..arrow_chunks import batch_entries, chunks, entry_batch, entry_size
from ..keys.system import SYSTEM_PREFIX
from ..version import __version__
from .errors import SavepointError

KIND = "spark-state/savepoint"
#: The manifest's format: 2 added ``process[].placement``, 3 ``process[].key`` (a reader of an
#: older format rejects a newer one by its number, with a message, rather than by the unknown field).
FORMAT_VERSION = 3
#: Manifest formats this release reads (1: no ``placement``; 1, 2: no ``key``; see :class:`ProcessEntry`).
READABLE_FORMATS = (1, 2, 3)
#: The format of the state files' entries (unchanged since format 1 of the manifest).
ENTRIES_FORMAT = 1
MANIFEST = "savepoint.json"
SPARK_DIR = "spark"
STATE_DIR = "state"
PROCESS_DIR = "process"
BATCH_ROWS = 65536
#: A record batch ends early once its keys and values reach this many bytes: the memory a writer
#: holds (one batch) stays bounded for large values too, and a batch stays far below the 2 GiB
#: that Arrow's 32-bit binary offsets allow.
BATCH_BYTES = 32 << 20
SCHEMA = pa.schema([pa.field("key", pa.binary(), nullable=False), pa.field("value", pa.binary(), nullable=False)],
                   metadata={b"spark_state.savepoint": str(ENTRIES_FORMAT).encode()})


def state_file(op: int, store: str, partition: int) -> str:
    return f"{STATE_DIR}/{op}/{store}/{partition}.arrow"


def process_file(name: str, partition: int) -> str:
    return f"{PROCESS_DIR}/{name}/{partition}.arrow"


def process_time_file(name: str, rel: str) -> str:
    """Where a process state's batch-clock file ``rel`` (``time/...``) goes in a savepoint."""
    return f"{PROCESS_DIR}/{name}/{rel}"


def process_time_files(manifest: "SavepointManifest", name: str) -> list[tuple[str, str]]:
    """``(savepoint path, path in the state location)`` of a process state's clock files."""
    prefix = f"{PROCESS_DIR}/{name}/time/"
    return [(f.path, f.path[len(prefix) - len("time/"):]) for f in manifest.files if f.path.startswith(prefix)]


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    crc32: int
    rows: Optional[int] = None
    keys: Optional[int] = None


#: How a ``mapInArrow`` task hands a state file's :class:`FileEntry` back to the driver: these columns
#: of its result rows (:func:`file_entry_arrays` writes them, :func:`file_entry_of_row` reads them
#: back). An RDD task returns the :class:`FileEntry` itself.
FILE_ENTRY_FIELDS = (pa.field("path", pa.string()), pa.field("size", pa.int64()), pa.field("crc32", pa.int64()),
                     pa.field("rows", pa.int64()), pa.field("keys", pa.int64()))
#: :data:`FILE_ENTRY_FIELDS` as a Spark DDL fragment (for ``mapInArrow``'s schema).
FILE_ENTRY_DDL = "path string, size bigint, crc32 bigint, rows bigint, keys bigint"


def file_entry_arrays(entry: FileEntry) -> list[pa.Array]:
    """One-row arrays of :data:`FILE_ENTRY_FIELDS` holding ``entry``."""
    return [pa.array([entry.path], pa.string()), pa.array([entry.size], pa.int64()),
            pa.array([entry.crc32], pa.int64()), pa.array([entry.rows], pa.int64()),
            pa.array([entry.keys], pa.int64())]


def file_entry_of_row(row: Any) -> FileEntry:
    """The :class:`FileEntry` of a result row (a Spark ``Row``) with :data:`FILE_ENTRY_FIELDS`."""
    return FileEntry(row.path, row.size, row.crc32, row.rows, row.keys)


@dataclass
class StoreEntry:
    name: str
    num_cols_prefix_key: int
    key_schema: dict
    value_schema: dict


@dataclass
class OperatorEntry:
    id: int
    name: str
    partitions: int
    stores: list[StoreEntry] = field(default_factory=list)


@dataclass
class ProcessEntry:
    name: str
    kind: str
    max_parallelism: Optional[int]
    parallelism: int
    location: str
    #: the state root the location was derived from (``<root>/<query id>/<name>``), or None
    under_root: Optional[str]
    #: where the query kept it: "checkpoint" (``<checkpoint>/spark-state/<name>``, the default),
    #: "former-default" (``./spark-state/<query id>/<name>``), "root" (``under_root``) or
    #: "explicit" (``state_location=``); "" in savepoints of earlier releases, whose
    #: ``under_root`` says "root" (not None) or "explicit" (None)
    placement: str = ""
    #: a keyed function's key columns as its state location records them (``{"columns": [...],
    #: "types": [Spark simple strings]}``); None for operator state, unrecorded keys and
    #: savepoints of earlier releases
    key: Optional[dict] = None


@dataclass
class SavepointManifest:
    source: str
    query_id: str
    batch_id: int
    provider_class: str
    partitions: int
    operators: list[OperatorEntry] = field(default_factory=list)
    process: list[ProcessEntry] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    spark_state: str = __version__
    format_version: int = FORMAT_VERSION

    @property
    def state_version(self) -> int:
        return self.batch_id + 1

    def file(self, path: str) -> FileEntry:
        for entry in self.files:
            if entry.path == path:
                return entry
        raise SavepointError(f"the savepoint manifest lists no file {path}: the savepoint is incomplete")

    def spark_files(self) -> list[FileEntry]:
        return [f for f in self.files if f.path.startswith(SPARK_DIR + "/")]

    def log_batches(self, log: str) -> list[int]:
        """The batch ids of Spark's ``offsets`` or ``commits`` log entries the savepoint holds."""
        prefix = f"{SPARK_DIR}/{log}/"
        return sorted(int(f.path[len(prefix):]) for f in self.files
                      if f.path.startswith(prefix) and f.path[len(prefix):].isdigit())

    def check_batch(self, where: str) -> None:
        """Check ``batch_id`` against the savepoint's own files: the last entries of the offset and
        commit logs it copied are those of its batch (a savepoint copies Spark's logs up to it).

        Raises:
            SavepointError: naming ``where`` (the manifest), its batch id and what the files say.
        """
        offsets, commits = self.log_batches("offsets"), self.log_batches("commits")
        if offsets[-1:] == commits[-1:] == [self.batch_id]:
            return
        found = "; ".join(f"the {log} log {_span(ids)}" for log, ids in (("offset", offsets), ("commit", commits)))
        raise SavepointError(
            f"{where} says batch {self.batch_id}, but its files hold Spark's logs up to another batch ({found}): "
            "the manifest does not match its files (edited, or copied from another savepoint), and a query "
            "restored from it would look for state of a batch the savepoint does not hold. Take a new savepoint")

    @property
    def total_keys(self) -> int:
        return sum(f.keys or 0 for f in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        doc = {"kind": KIND, **asdict(self), "state_version": self.state_version}
        return json.dumps(doc, indent=1).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "SavepointManifest":
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SavepointError(f"{where} is not valid JSON ({exc}): the savepoint is damaged") from None
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            raise SavepointError(f"{where} is not a spark-state savepoint manifest")
        if doc.get("format_version") not in READABLE_FORMATS:
            raise SavepointError(f"{where} has savepoint format {doc.get('format_version')!r}; this release "
                                 f"reads formats {', '.join(map(str, READABLE_FORMATS))}")
        try:
            return cls(
                source=str(doc["source"]), query_id=str(doc["query_id"]), batch_id=int(doc["batch_id"]),
                provider_class=str(doc["provider_class"]), partitions=int(doc["partitions"]),
                operators=[OperatorEntry(int(o["id"]), str(o["name"]), int(o["partitions"]),
                                         [StoreEntry(**s) for s in o["stores"]]) for o in doc["operators"]],
                process=[ProcessEntry(**p) for p in doc["process"]],
                files=[FileEntry(**f) for f in doc["files"]],
                created_ms=int(doc["created_ms"]), spark_state=str(doc["spark_state"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SavepointError(f"{where}: malformed savepoint manifest ({exc!r})") from None


def _span(ids: list[int]) -> str:
    if not ids:
        return "is missing"
    if len(ids) == 1:
        return f"has batch {ids[0]}"
    return f"has batches {ids[0]}..{ids[-1]}"


# ---------------------------------------------------------------------------- state files
class BinarySink(Protocol):
    """A writable binary file object (a file, ``io.BytesIO``, ``SpooledUpload``, ...)."""

    def write(self, data: Any, /) -> Any: ...


def write_entries(sink: BinarySink, entries: Iterable[tuple[bytes, bytes]],
                  on_batch: Optional[Callable[[int], None]] = None) -> tuple[int, int]:
    """Write ``entries`` (already in key order) to the writable binary file object ``sink`` as
    a state file; returns (rows, data keys). ``on_batch(rows)`` is called after each batch.

    Memory: one record batch at a time -- at most :data:`BATCH_ROWS` rows, and
    :data:`BATCH_BYTES` of keys and values plus its last entry -- whatever the number of
    entries; ``sink`` decides where the bytes go (:class:`~spark_state.storage.spool.SpooledUpload`
    spools them to local disk). ``sink`` is written to, never closed.
    """
    rows = keys = 0
    with pa.ipc.new_file(sink, SCHEMA) as writer:
        for batch, data_keys in _batches(entries):
            writer.write_batch(batch)
            rows += batch.num_rows
            keys += data_keys
            if on_batch is not None:
                on_batch(batch.num_rows)
    return rows, keys


def read_batches(path: str, where: str, reverse: bool = False) -> Iterator[pa.RecordBatch]:
    """The record batches of the state file at local ``path``, memory-mapped: a batch's
    buffers are views of the mapped file (the OS pages them in and out), so reading costs
    no memory of the file's size. Check the file first (:func:`check_sums`); ``where`` names
    it in errors. ``reverse``: last batch first (system keys, which sort last, without reading
    the data before them)."""
    try:
        with pa.memory_map(path) as source:
            reader = pa.ipc.open_file(source)
            if not reader.schema.equals(SCHEMA, check_metadata=False):
                raise SavepointError(f"{where} has schema {reader.schema}, not (key binary, value binary)")
            count = reader.num_record_batches
            for i in (range(count - 1, -1, -1) if reverse else range(count)):
                # A batch keeps the mapping alive while it is referenced, after the file is closed
                # (and unlinked) too.
                yield reader.get_batch(i)
    except pa.ArrowInvalid as exc:
        raise SavepointError(f"{where} is not a readable Arrow IPC file ({exc}): the savepoint is damaged") from None


def read_entries(path: str, where: str) -> Iterator[tuple[bytes, bytes]]:
    """The entries of the state file at local ``path``, in file (key) order, a batch at a time."""
    for batch in read_batches(path, where):
        yield from batch_entries(batch.column(0), batch.column(1))


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def verify(data: bytes, entry: FileEntry, where: str) -> None:
    """Raise :class:`SavepointError` naming ``where`` unless size and CRC-32 of ``data`` match
    the manifest (for small files read whole: Spark's logs, clock files)."""
    check_sums(len(data), lambda: crc32(data), entry, where)


def check_sums(size: int, crc: Callable[[], int], entry: FileEntry, where: str) -> None:
    """Raise :class:`SavepointError` naming ``where`` unless ``size`` and the CRC-32 ``crc()``
    match the manifest. The size is compared first, so a truncated file is never read for its
    CRC."""
    if size != entry.size:
        raise SavepointError(f"{where} is {size} bytes, the savepoint manifest says {entry.size}: "
                             "the savepoint is damaged (truncated or changed); take a new one")
    found = crc()
    if found != entry.crc32:
        raise SavepointError(f"{where} has CRC-32 {found:#010x}, the savepoint manifest says {entry.crc32:#010x}: "
                             "the savepoint is damaged; take a new one")


def is_state_file(path: str) -> bool:
    """Whether savepoint path ``path`` is a state file (``state/.../<p>.arrow``,
    ``process/<name>/<i>.arrow``), which may be GBs and is never read whole."""
    return path.endswith(".arrow") and path.startswith((STATE_DIR + "/", PROCESS_DIR + "/"))


def _batches(entries: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[pa.RecordBatch, int]]:
    """``entries`` as record batches of at most :data:`BATCH_ROWS` rows and about
    :data:`BATCH_BYTES` (a batch ends at the first entry that reaches it), each with its count of
    data keys. An empty input gives one empty batch, so that an empty state file holds one
    record batch. The Python list of a batch is dropped before it is yielded: while it is
    written, only its Arrow copy is held."""
    for chunk in chunks(entries, BATCH_ROWS, BATCH_BYTES, entry_size, at_least_one=True):
        data_keys = sum(1 for k, _ in chunk if k[:1] != SYSTEM_PREFIX)
        batch = entry_batch(chunk, SCHEMA)
        del chunk
        yield batch, data_keys


def describe(manifest: SavepointManifest) -> dict[str, Any]:
    """A short summary (for ``--json`` output and logs)."""
    return {"batch_id": manifest.batch_id, "query_id": manifest.query_id, "partitions": manifest.partitions,
            "operators": len(manifest.operators), "process_states": len(manifest.process),
            "keys": manifest.total_keys, "bytes": manifest.total_bytes, "files": len(manifest.files)}
