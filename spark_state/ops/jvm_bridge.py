"""Spark's own providers, driven from Python: reading and writing HDFS / RocksDB provider stores.

``migrate`` (and a savepoint of a checkpoint written by Spark's providers) must read and
write formats that only Spark's providers know (``.delta``/``.snapshot`` files, RocksDB zips
with Spark's key encoding). Rather than re-implement them, the shim's ``OpsBridge``
(``jvm-shim/.../OpsBridge.scala``) lets the providers do it in the driver JVM: one store at a
time, through Arrow IPC files in a temporary directory, in the savepoint's row layout. An
exported file comes sorted from the JVM (ascending unsigned-bytewise keys, the savepoint's row
order; the JVM sorts in chunks of bounded size and merges them from disk), so it is read here a
record batch at a time, memory-mapped.

A SparkSession is needed: the active one (it must have the shim jar on its class path, as
:func:`spark_state.configure` and ``--jars "$(python -m spark_state jar)"`` give it), or a
local one started for the command line.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from typing import Iterator
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from ..arrow_chunks import batch_entries
from ..keys import system as syskeys
from . import savepoint_format as F
from .checkpoint_reader import OperatorInfo, SparkCheckpoint
from .errors import UnsupportedCheckpointError

BRIDGE = "org.apache.spark.sql.execution.streaming.state.sparkstate.OpsBridge"

#: Bytes of rows the driver JVM sorts in its heap at a time when exporting a store (beyond them it
#: writes sorted runs to local disk and merges them); 0 takes the driver's part of the memory budget,
#: ``MemoryBudget.exportChunkBytes`` (32 MB of a 1 GB driver). Tests set it small to exercise the runs.
EXPORT_CHUNK_BYTES = 0

_LOG = logging.getLogger(__name__)


def session():
    """The active SparkSession, or a local one with the shim jar (command line)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    import sys

    from ..spark.jvm import jar_path

    return (SparkSession.builder.master("local[1]").appName("spark-state-ops")
            .config("spark.jars", jar_path()).config("spark.ui.enabled", "false")
            .config("spark.pyspark.python", sys.executable).getOrCreate())


def _bridge(spark):
    from py4j.java_gateway import JavaClass

    from ..spark.connect import is_connect

    if is_connect(spark):
        raise UnsupportedCheckpointError(
            "this checkpoint was written by Spark's own state store provider, which only a classic driver "
            "can read (through its JVM), but the active SparkSession is a Spark Connect client, which has no "
            "JVM: run the operation with the spark-state command (spark-state savepoint|migrate ...) on a "
            "machine that can read the checkpoint (e.g. the Connect server's host), or from a Python process "
            "without an active Spark Connect session")

    bridge = spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state.sparkstate.OpsBridge
    if not isinstance(bridge, JavaClass):  # py4j gives a JavaPackage for a class it cannot load
        raise UnsupportedCheckpointError(
            "the SparkSession has no spark-state shim on its class path (class OpsBridge not found): start "
            "it with spark_state.configure(builder) or --jars \"$(python -m spark_state jar)\"") from None
    return bridge


def _jmap(spark, conf: dict[str, str]):
    m = spark.sparkContext._jvm.java.util.HashMap()
    for k, v in conf.items():
        m.put(k, v)
    return m


def spark_provider_reader(ckpt: SparkCheckpoint, batch: int):
    """A savepoint store reader for a checkpoint of Spark's HDFS or RocksDB provider.

    Its rows come sorted from the JVM (``OpsBridge.exportStore``: ascending unsigned-bytewise
    keys, in bounded heap); they are yielded a record batch (at most :data:`F.BATCH_ROWS`, the
    JVM's batch size) at a time from the memory-mapped file, never the whole store at once."""
    spark = session()
    bridge = _bridge(spark)
    provider = ckpt.provider_class(batch)
    conf = ckpt.offset(batch).conf
    state_root = _hadoop_url(ckpt.url) + "/state"

    def read(op: OperatorInfo, store: str, partition: int, version: int) -> Iterator[tuple[bytes, bytes]]:
        key_schema, value_schema = ckpt.store_schema(op, store)
        info = next(s for s in op.stores if s.name == store)
        tmp = tempfile.mkdtemp(prefix="spark-state-export-")
        try:
            out = os.path.join(tmp, "rows.arrow")
            rows, runs = bridge.exportStore(state_root, op.id, partition, store, version, json.dumps(key_schema),
                                            json.dumps(value_schema), info.num_cols_prefix_key, provider,
                                            _jmap(spark, conf), out, EXPORT_CHUNK_BYTES)
            _LOG.debug("exported %d rows of store %s of operator %d, partition %d, version %d (%d sorted runs)",
                       rows, store, op.id, partition, version, runs)
            with pa.memory_map(out) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    batch_ = reader.get_batch(i)
                    yield from batch_entries(batch_.column(0), batch_.column(1))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    return read


def spark_provider_writer(target_url: str, provider: str, conf: dict[str, str]):
    """A restore split writer that writes stores with Spark's ``provider`` (HDFS or RocksDB)."""
    spark = session()
    bridge = _bridge(spark)
    state_root = _hadoop_url(target_url) + "/state"
    marker = syskeys.marker_key(b"")

    def write(op: OperatorInfo, entry: F.StoreEntry, split, version: int) -> int:
        key_schema, value_schema, store = entry.key_schema, entry.value_schema, entry.name
        stamped = any(pa.compute.any(pa.compute.equal(b.column(0), pa.scalar(marker, pa.binary()))).as_py()
                      for p in range(split.n) for b in split.batches(p))
        rows = 0
        tmp = tempfile.mkdtemp(prefix="spark-state-import-")
        try:
            for p in range(split.n):
                path = os.path.join(tmp, f"{p}.arrow")
                with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, F.SCHEMA) as writer:
                    for b in split.batches(p):
                        writer.write_batch(b)
                rows += bridge.importStore(state_root, op.id, p, store, version, json.dumps(key_schema),
                                           json.dumps(value_schema), entry.num_cols_prefix_key, provider,
                                           _jmap(spark, conf), path, stamped)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return rows

    return write


def _hadoop_url(url: str) -> str:
    """A checkpoint URL as Hadoop's ``Path(String)`` takes it: unescaped (the storage layer's URLs
    are escaped URIs), local paths as file: URLs, s3:// as s3a://."""
    if "://" not in url:
        return "file:" + os.path.abspath(url)
    parts = urlsplit(url)
    scheme = "s3a" if parts.scheme == "s3" else parts.scheme
    if scheme == "file":
        return "file:" + unquote(parts.path)
    return f"{scheme}://{parts.netloc}{unquote(parts.path)}"
