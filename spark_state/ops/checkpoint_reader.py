"""Reading (and writing the few files operations write) in a Spark streaming checkpoint.

What Spark keeps in a checkpoint ``<cp>`` (Spark 4.3, offset log v1)::

    metadata                          {"id": "<query id>"}
    offsets/<b>                       "v1" \\n {"batchWatermarkMs", "batchTimestampMs", "conf": {...}} \\n
                                      one line per source: its end offset of batch b (or "-")
    commits/<b>                       "v1" \\n {"nextBatchWatermarkMs": ...}: batch b is committed
    sources/<i>/<b>[.compact]         source i's own log (file source: the files of batch b)
    state/<op>/_metadata/metadata     operator metadata v1: {"operatorInfo": {"operatorId",
                                      "operatorName"}, "stateStoreInfo": [{"storeName",
                                      "numColsPrefixKey", "numPartitions"}]}
    state/<op>/<p>[/<store>]/         the state of one store of one partition, in the provider's
                                      format; "/<store>" is omitted for the store "default"
    state/<op>/0[/<store>]/_metadata/schema   key and value schema (partition 0 only)
    .<name>.crc                       Hadoop's checksum of <name> (local file systems)

The entries of the offset and commit logs are read and written by their one codec,
:mod:`spark_state.spark.logs`.

The offset log's ``conf`` pins, per checkpoint, the partition count of stateful operators
(``spark.sql.shuffle.partitions``) and the provider class
(``spark.sql.streaming.stateStore.providerClass``; absent in checkpoints from before Spark
2.3 means the HDFS provider). A batch is *committed* once ``commits/<b>`` exists; Spark
writes ``offsets/<b>`` before running batch ``b`` and ``commits/<b>`` after every sink and
state store of the batch committed. The state of a committed batch ``b`` is store version
``b + 1`` of every store.

Everything here goes through :class:`~spark_state.storage.CheckpointStorage`, so a
checkpoint on ``s3://`` or ``hdfs://`` reads as one on local disk. Directories are never
listed (object stores have none): operators are found by probing ``state/<op>/_metadata/
metadata`` from 0 on (Spark numbers operators from 0 without gaps), partitions come from the
operator metadata. Spark 3.5 writes no operator metadata: there, an operator is found by its
partition 0's schema file, and what the metadata would say is inferred from its schemas.

Writes of Spark's log files (:meth:`SparkCheckpoint.write_log_file`) are atomic and remove a
stale Hadoop ``.crc`` sibling, whose mismatch would otherwise fail Spark's read.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import CheckpointFileMissingError
from ..spark.logs import OffsetEntry
from ..storage import CheckpointStorage, open_storage
from .errors import NoCommittedBatchError, NotACheckpointError, UnsupportedCheckpointError

PROVIDER_CLASS_CONF = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARKSTATE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider"
#: Short names of the providers, as the command line spells them.
PROVIDERS = {"spark-state": SPARKSTATE_PROVIDER, "hdfs": HDFS_PROVIDER, "rocksdb": ROCKSDB_PROVIDER}

DEFAULT_STORE = "default"
OPERATOR_METADATA = "_metadata/metadata"
#: Operator metadata v2 (transformWithState) lives here; we cannot operate on those operators.
OPERATOR_METADATA_V2_DIR = "_metadata/v2"
_BATCH_FILE_RE = re.compile(r"^(\d+)(\.compact)?$")


def provider_short_name(provider_class: str) -> str:
    for short, cls in PROVIDERS.items():
        if cls == provider_class:
            return short
    return provider_class


@dataclass(frozen=True)
class StoreInfo:
    """One state store of an operator (Spark's ``stateStoreInfo`` entry)."""

    name: str
    num_cols_prefix_key: int
    partitions: int


@dataclass(frozen=True)
class OperatorInfo:
    """A stateful operator of the query, from ``state/<id>/_metadata/metadata``."""

    id: int
    name: str
    stores: tuple[StoreInfo, ...]
    #: the raw metadata document (rewritten with a new partition count by rescale)
    metadata: dict = field(compare=False, repr=False, default_factory=dict)

    @property
    def partitions(self) -> int:
        return max((s.partitions for s in self.stores), default=0)

    @property
    def store_names(self) -> list[str]:
        return [s.name for s in self.stores]

    def encode_metadata(self) -> bytes:
        """The operator metadata file's bytes (``v1`` line, then compact JSON, as Spark writes it)."""
        return b"v1\n" + json.dumps(self.metadata, separators=(",", ":")).encode("utf-8")

    def store_path(self, partition: int, store: str) -> str:
        """``state/<op>/<partition>[/<store>]`` relative to the checkpoint."""
        base = f"state/{self.id}/{partition}"
        return base if store == DEFAULT_STORE else f"{base}/{store}"

    def schema_path(self, store: str) -> str:
        return f"{self.store_path(0, store)}/_metadata/schema"

    def with_partitions(self, partitions: int) -> "OperatorInfo":
        doc = json.loads(json.dumps(self.metadata))
        for info in doc.get("stateStoreInfo", []):
            info["numPartitions"] = partitions
        stores = tuple(StoreInfo(s.name, s.num_cols_prefix_key, partitions) for s in self.stores)
        return OperatorInfo(self.id, self.name, stores, doc)


#: The stores of a stream-stream join (state format v1/v2), in Spark's order.
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")


def _operator_of_schemas(key: dict, value: dict) -> tuple[str, int]:
    """``(operator name, prefix-scan key columns)`` of a one-store operator, by its state schemas:
    the names Spark 4 writes in operator metadata, which Spark 3.5 does not write."""
    key_fields = key.get("fields") or []
    value_fields = value.get("fields") or []
    value_names = [f.get("name") for f in value_fields]
    if not key_fields:
        return "globalLimit", 0
    # A session window's key is the group keys and the session's start; prefix scans match the group keys.
    if key_fields[-1].get("name") == "sessionStartTime" and \
            any((f.get("metadata") or {}).get("spark.sessionWindow") for f in value_fields):
        return "sessionWindowStateStoreSaveExec", len(key_fields) - 1
    if value_names == ["__dummy__"]:
        return "dedupe", 0
    if value_names == ["expiresAtMicros"]:
        return "dedupeWithinWatermark", 0
    if value_names[:1] == ["groupState"]:
        return "flatMapGroupsWithState", 0
    return "stateStoreSave", 0


def parse_schema_file(data: bytes, where: str) -> tuple[dict, dict]:
    """Key and value schema (Spark StructType JSON) of a ``_metadata/schema`` file.

    Layouts (Java ``DataOutputStream``): v1 ``writeUTF("v1")``, ``writeUTF(key json)``,
    ``writeUTF(value json)``; v2 ``writeUTF("v2")``, then for the key and for the value
    schema ``writeInt(chunks)`` and ``writeUTF(chunk)`` per chunk (JSON split in 64 KB parts).
    """
    pos = 0

    def utf() -> str:
        nonlocal pos
        (n,) = struct.unpack_from(">H", data, pos)
        text = data[pos + 2:pos + 2 + n].decode("utf-8")
        pos += 2 + n
        return text

    try:
        version = utf()
        if version == "v1":
            return json.loads(utf()), json.loads(utf())
        if version == "v2":
            out = []
            for _ in range(2):
                (chunks,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append(json.loads("".join(utf() for _ in range(chunks))))
            return out[0], out[1]
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnsupportedCheckpointError(f"{where}: cannot parse the state schema file ({exc})") from None
    raise UnsupportedCheckpointError(
        f"{where}: state schema file version {version!r} is not supported (v1 and v2 are; v3 is "
        "transformWithState's, which the provider does not run)")


class SparkCheckpoint:
    """A Spark streaming checkpoint, read through checkpoint storage.

    Args:
        location: the checkpoint's path or URL (``checkpointLocation`` of the query).
        storage_options: checkpoint storage options (``s3.*``, ``hdfs.*``), if remote.
        must_exist: raise :class:`NotACheckpointError` unless it holds ``metadata`` and an
            offset log.
    """

    def __init__(self, location: str, storage_options: Optional[dict[str, str]] = None,
                 must_exist: bool = True) -> None:
        self.location = location
        self.storage_options = dict(storage_options or {})
        self.storage: CheckpointStorage = open_storage(location, self.storage_options)
        if must_exist and not (self.storage.exists("metadata") and self.batch_ids("offsets")):
            if not self.storage.root_exists():
                raise NotACheckpointError(f"{location} does not exist: pass the query's checkpointLocation")
            raise NotACheckpointError(
                f"{location} is not a Spark streaming checkpoint: it has no 'metadata' file and "
                "offset log ('offsets/'); pass the query's checkpointLocation")

    @property
    def url(self) -> str:
        return self.storage.url

    # ------------------------------------------------------------------ Spark's logs
    def query_id(self) -> str:
        doc = self._json("metadata")
        return str(doc.get("id", ""))

    def batch_ids(self, log: str) -> list[int]:
        """Batch ids present in ``offsets`` / ``commits`` (ascending)."""
        ids = []
        for name in self.storage.list_dir(log):
            m = _BATCH_FILE_RE.match(name)
            if m and not m.group(2):
                ids.append(int(m.group(1)))
        return sorted(ids)

    def last_committed(self) -> Optional[int]:
        commits = self.batch_ids("commits")
        return commits[-1] if commits else None

    def committed_batch(self, batch: Optional[int] = None) -> int:
        """``batch`` if it is committed (with its offsets), else the latest committed batch."""
        commits = self.batch_ids("commits")
        if not commits:
            raise NoCommittedBatchError(
                f"{self.url} has no committed batch (commits/ is empty): run the query until it has "
                "completed at least one micro-batch")
        if batch is None:
            batch = commits[-1]
        elif batch not in commits:
            raise NoCommittedBatchError(
                f"batch {batch} is not committed in {self.url} (committed batches retained: "
                f"{_span(commits)}); pick one of those, or omit --batch for the latest")
        if not self.storage.exists(f"offsets/{batch}"):
            raise NoCommittedBatchError(
                f"{self.storage.full_url(f'offsets/{batch}')} is missing (purged by retention?)")
        return batch

    def offset(self, batch: int) -> OffsetEntry:
        path = f"offsets/{batch}"
        return OffsetEntry.decode(batch, self._read(path), self.storage.full_url(path))

    def provider_class(self, batch: int) -> str:
        return self.offset(batch).conf.get(PROVIDER_CLASS_CONF, HDFS_PROVIDER)

    def partitions(self, batch: int) -> int:
        conf = self.offset(batch).conf
        try:
            return int(conf[SHUFFLE_PARTITIONS_CONF])
        except (KeyError, ValueError):
            raise UnsupportedCheckpointError(
                f"{self.storage.full_url(f'offsets/{batch}')} does not pin {SHUFFLE_PARTITIONS_CONF} "
                "(a checkpoint from an old Spark release?)") from None

    def source_count(self) -> int:
        n = 0
        while self.storage.list_dir(f"sources/{n}"):
            n += 1
        return n

    def source_files(self, index: int) -> list[tuple[str, Optional[int]]]:
        """Files of ``sources/<index>``: (name, batch id or None for other files)."""
        out = []
        for name in self.storage.list_dir(f"sources/{index}"):
            if name.startswith("."):
                continue  # Hadoop .crc files and hidden temp files
            m = _BATCH_FILE_RE.match(name)
            out.append((name, int(m.group(1)) if m else None))
        return out

    # ------------------------------------------------------------------ operators
    def operators(self) -> list[OperatorInfo]:
        """Every stateful operator, by id: from its v1 operator metadata, or -- a checkpoint that has
        none (Spark 3.5 writes none) -- from its state schema files (:meth:`_inferred_operator`)."""
        ops = []
        op = 0
        while True:
            path = f"state/{op}/{OPERATOR_METADATA}"
            if self.storage.exists(path):
                ops.append(self._operator(op, path))
            elif self.storage.list_dir(f"state/{op}/{OPERATOR_METADATA_V2_DIR}"):
                raise UnsupportedCheckpointError(
                    f"operator {op} of {self.url} has v2 operator metadata (transformWithState): the "
                    "operations tools handle the operators spark-state's provider runs")
            else:
                inferred = self._inferred_operator(op)
                if inferred is None:
                    break
                ops.append(inferred)
            op += 1
        return ops

    def _inferred_operator(self, op: int) -> Optional[OperatorInfo]:
        """Operator ``op`` of a checkpoint without operator metadata, from what partition 0's state
        schema files say (None: there is no operator ``op``). Its stores: ``default``, or a join's
        four; the partition count: the latest batch's; the operator name and the prefix-scan
        columns (session windows) from the key and value schemas, as Spark 4 records them."""
        if self.storage.exists(f"state/{op}/0/_metadata/schema"):
            key, value = self.store_schema(OperatorInfo(op, "", ()), DEFAULT_STORE)
            name, prefix = _operator_of_schemas(key, value)
            stores: tuple[tuple[str, int], ...] = ((DEFAULT_STORE, prefix),)
        elif self.storage.exists(f"state/{op}/0/{JOIN_STORES[0]}/_metadata/schema"):
            name, stores = "symmetricHashJoin", tuple((store, 0) for store in JOIN_STORES)
        else:
            return None
        last = self.last_committed()
        partitions = self.partitions(last) if last is not None else 0
        doc = {"operatorInfo": {"operatorId": op, "operatorName": name},
               "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": p, "numPartitions": partitions}
                                  for s, p in stores]}
        return OperatorInfo(op, name, tuple(StoreInfo(s, p, partitions) for s, p in stores), doc)

    def _operator(self, op: int, path: str) -> OperatorInfo:
        doc = self._json(path)
        try:
            info = doc["operatorInfo"]
            stores = tuple(StoreInfo(str(s["storeName"]), int(s.get("numColsPrefixKey", 0)), int(s["numPartitions"]))
                           for s in doc["stateStoreInfo"])
            return OperatorInfo(int(info["operatorId"]), str(info["operatorName"]), stores, doc)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsupportedCheckpointError(
                f"{self.storage.full_url(path)}: unexpected operator metadata ({exc!r})") from None

    def store_schema(self, op: OperatorInfo, store: str) -> tuple[dict, dict]:
        path = op.schema_path(store)
        return parse_schema_file(self._read(path), self.storage.full_url(path))

    def store_storage(self, op: OperatorInfo, partition: int, store: str) -> CheckpointStorage:
        return self.storage.child(op.store_path(partition, store))

    # ------------------------------------------------------------------ files
    def read(self, path: str) -> bytes:
        return self._read(path)

    def write_log_file(self, path: str, data: bytes) -> None:
        """Write one of Spark's files atomically, dropping a stale Hadoop checksum beside it."""
        self.storage.write_bytes(path, data)
        directory, _, name = path.rpartition("/")
        self.storage.delete(f"{directory}/.{name}.crc" if directory else f".{name}.crc")

    def _read(self, path: str) -> bytes:
        try:
            return self.storage.read_bytes(path)
        except CheckpointFileMissingError:
            raise NotACheckpointError(f"{self.storage.full_url(path)} is missing") from None

    def _json(self, path: str) -> dict[str, Any]:
        data = self._read(path)
        text = data.decode("utf-8")
        # Spark's metadata logs start with a version line ("v1"); plain JSON files do not.
        if text.startswith("v") and "\n" in text:
            text = text.split("\n", 1)[1]
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise NotACheckpointError(f"{self.storage.full_url(path)} is not JSON ({exc})") from None


def _span(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
