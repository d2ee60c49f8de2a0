"""Drive spark-state's ``SparkStateProvider`` store by store through Py4J, on the test session's
JVM: the shim's real provider, its real Python worker, checkpoints on local disk. The view and
read-path tests use it to run exact sequences of loads, reads, writes, commits and aborts that a
streaming query would make only by chance.

Keys are rows of int columns, values one int column. A store has either a plain key (``k``) or,
with ``prefix_cols=1``, a prefix-scan key ``(g, k)`` as session windows use it (Spark's
``PrefixKeyScanStateEncoderSpec``); keys are then given as ``(g, k)`` tuples.
"""

from __future__ import annotations

import json
import struct
import uuid
from typing import Iterable, Optional, Union

P = "spark.sql.streaming.stateStore.sparkState."
DEFAULT = "default"
BACKENDS = {"rocksdb": {}, "hashmap": {P + "backend": "hashmap"}}

Key = Union[int, tuple[int, ...]]


def _struct(*names: str) -> str:
    return json.dumps({"type": "struct", "fields": [
        {"name": n, "type": "integer", "nullable": True, "metadata": {}} for n in names]})


class Shim:
    """One SparkStateProvider instance (one store, one run) and helpers for int rows."""

    def __init__(self, spark, root: str, confs: dict[str, str], *, prefix_cols: int = 0) -> None:
        self.spark = spark
        self.prefix_cols = prefix_cols
        jvm = spark._jvm
        self.jvm = jvm
        state = jvm.org.apache.spark.sql.execution.streaming.state
        key_names = ("g", "k") if prefix_cols else ("k",)
        self.key_schema = jvm.org.apache.spark.sql.types.DataType.fromJson(_struct(*key_names))
        self.value_schema = jvm.org.apache.spark.sql.types.DataType.fromJson(_struct("n"))
        spark._jsparkSession.streams()  # the driver's state store coordinator, which commits report to
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            store_conf = state.StateStoreConf.apply(spark._jsparkSession.sessionState().conf())
        finally:
            for key in confs:
                spark.conf.unset(key)
        hadoop = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        hadoop.set("sql.streaming.runId", str(uuid.uuid4()))
        spec = (state.PrefixKeyScanStateEncoderSpec(self.key_schema, prefix_cols) if prefix_cols
                else state.NoPrefixKeyStateEncoderSpec(self.key_schema))
        self.provider = state.sparkstate.SparkStateProvider()
        self.provider.init(state.StateStoreId(root, 0, 0, DEFAULT), self.key_schema, self.value_schema,
                           spec, False, store_conf, hadoop, False, jvm.scala.Option.empty())

    def _row(self, *values: int):
        """An UnsafeRow of int columns, built from its bytes: the null bits (one 8-byte word for up to
        64 columns), then one 8-byte word per column holding the int little-endian, zero-padded --
        exactly what Spark's UnsafeProjection writes. (Calling two generated projections through
        Py4J fails: both classes are named SpecificUnsafeProjection, and Py4J reuses the first one's
        method for the second.)"""
        data = bytes(8) + b"".join(struct.pack("<iI", v, 0) for v in values)
        row = self.jvm.org.apache.spark.sql.catalyst.expressions.UnsafeRow(len(values))
        row.pointTo(bytearray(data), len(data))
        return row

    def key(self, k: Key):
        return self._row(*(k if isinstance(k, tuple) else (k,)))

    def _key_of(self, row) -> Key:
        if self.prefix_cols:
            return (row.getInt(0), row.getInt(1))
        return row.getInt(0)

    def store(self, version: int):
        return self.provider.getStore(version, self.jvm.scala.Option.empty(), False, False)

    def read_store(self, version: int):
        return self.provider.getReadStore(version, self.jvm.scala.Option.empty())

    def upgrade(self, read_store, version: int):
        return self.provider.upgradeReadStoreToWriteStore(read_store, version, self.jvm.scala.Option.empty(), False)

    def put(self, store, k: Key, n: int) -> None:
        store.put(self.key(k), self._row(n), DEFAULT)

    def remove(self, store, k: Key) -> None:
        store.remove(self.key(k), DEFAULT)

    def get(self, store, k: Key) -> Optional[int]:
        row = store.get(self.key(k), DEFAULT)
        return None if row is None else row.getInt(0)

    def key_exists(self, store, k: Key) -> bool:
        return bool(store.keyExists(self.key(k), DEFAULT))

    def multi_get(self, store, keys: Iterable[Key]) -> list[Optional[int]]:
        keys = list(keys)
        rows = self.spark.sparkContext._gateway.new_array(
            self.jvm.org.apache.spark.sql.catalyst.expressions.UnsafeRow, len(keys))
        for i, k in enumerate(keys):
            rows[i] = self.key(k)
        it = store.multiGet(rows, DEFAULT)
        out = []
        while it.hasNext():
            row = it.next()
            out.append(None if row is None else row.getInt(0))
        return out

    def exported(self, store) -> int:
        """1 if the worker exported or shipped the version for this store's load, else 0."""
        sparkstate = self.jvm.org.apache.spark.sql.execution.streaming.state.sparkstate
        metric = sparkstate.ProviderCore.ViewExportsMetric()
        return store.metrics().customMetrics().apply(metric)

    def _drain(self, store, it, evict) -> dict:
        out = {}
        while it.hasNext():
            pair = it.next()
            k = self._key_of(pair.key())
            if k in out:
                raise AssertionError(f"a scan returned key {k} twice")
            out[k] = pair.value().getInt(0)
            if evict is not None and evict(k):
                store.remove(pair.key(), DEFAULT)  # the key row the scan returned, as Spark's eviction does
        return out

    def scan(self, store, evict=None) -> dict:
        """Every entry of ``store.iterator()``; with ``evict``, keys for which it is true are removed
        while the scan goes on (as watermark eviction does)."""
        return self._drain(store, store.iterator(DEFAULT), evict)

    def prefix_scan(self, store, g: int, evict=None) -> dict:
        """Every entry of ``store.prefixScan((g))`` (prefix-scan stores), ``evict`` as for :meth:`scan`."""
        return self._drain(store, store.prefixScan(self._row(g), DEFAULT), evict)

    def commit(self, store, writes: dict) -> int:
        for k, n in writes.items():
            if n is None:
                self.remove(store, k)
            else:
                self.put(store, k, n)
        return store.commit()

    def close(self) -> None:
        self.provider.close()
