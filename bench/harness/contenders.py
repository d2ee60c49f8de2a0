"""The state store providers the benchmarks compare, by the names their ``--providers`` take.

One table, so that every benchmark means the same by ``sparkstate-hashmap`` and sets the same
confs for it: ``hdfs`` and ``rocksdb`` are Spark's built-in providers, ``sparkstate`` and
``sparkstate-hashmap`` this project's on its two backends. Ours also need
``spark_state.configure`` on the builder (the shim jar, the plugin that starts the workers);
Spark's must not get it, so that the plugin's workers do not run beside a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
BACKEND_CONF = "spark.sql.streaming.stateStore.sparkState.backend"
TTL_CONF = "spark.sql.streaming.stateStore.sparkState.ttl"

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARKSTATE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider"


@dataclass(frozen=True)
class Contender:
    """A provider as a benchmark runs it: its class, the Spark confs it adds, and whether it is
    spark-state's (``configure`` goes on the builder)."""

    name: str
    provider_class: str
    confs: Mapping[str, str] = field(default_factory=dict)
    ours: bool = False

    def with_confs(self, name: str, confs: Mapping[str, str]) -> "Contender":
        """A variant of this contender under another name, with more confs (a TTL, a setting)."""
        return Contender(name, self.provider_class, {**self.confs, **confs}, self.ours)


CONTENDERS: dict[str, Contender] = {
    "hdfs": Contender("hdfs", HDFS_PROVIDER),
    "rocksdb": Contender("rocksdb", ROCKSDB_PROVIDER),
    "sparkstate": Contender("sparkstate", SPARKSTATE_PROVIDER, {BACKEND_CONF: "rocksdb"}, ours=True),
    "sparkstate-hashmap": Contender("sparkstate-hashmap", SPARKSTATE_PROVIDER, {BACKEND_CONF: "hashmap"}, ours=True),
}


def contender(name: str) -> Contender:
    """The contender of a name; any other name is taken as a provider class name (Spark's kind)."""
    return CONTENDERS.get(name) or Contender(name, name)


def spark_state_importable() -> tuple[bool, str]:
    """Whether ``spark_state.configure`` imports here, and if not, why (for a skip message)."""
    try:
        from spark_state import configure  # noqa: F401
    except Exception as exc:  # ImportError, or anything the package raises on import
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""
