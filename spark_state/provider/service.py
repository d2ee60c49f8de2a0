"""The store service the JVM shim calls: one :class:`VersionedStore` per provider instance.

Every method takes the provider instance id the shim generated in ``init`` and returns a
JSON string. Stores are opened lazily from the arguments of ``load``, so a worker that was
restarted (after a crash) serves the same instance ids without any extra handshake: it
restores from checkpoint storage.

After every load and commit the service exports a *read view* of the version: a RocksDB
checkpoint of the store's database (hard-linked immutable SSTs, no write-ahead log) that
the shim opens read-only (``viewPath`` in the replies). Reads therefore never cross the
process boundary, and a view cannot change under its reader.

Why not a RocksDB secondary that tails the live database: after the primary flushes, a
secondary keeps the memtable it replayed from the old log, which shadows the newer values
in the flushed SST, so reads go stale (reproduced with rocksdict 0.3.29 / RocksDB 9.8.4,
and by this project's SIGKILL test). A view per version has no such failure mode.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import asdict
from typing import Any, Callable, Optional

import pyarrow as pa

from .. import constants as C
from ..config import EngineConfig
from ..errors import ConfigError
from ..store import VersionedStore
from .protocol import SERVICE_INTERFACE

_LOG = logging.getLogger(__name__)


#: Fault injection for tests of worker crashes (never set in production): the value
#: ``<version>:<marker dir>:once|always`` makes the worker exit abruptly in the middle of
#: committing ``<version>`` -- once per marker dir, or on every attempt.
CRASH_ON_COMMIT_OPTION = "testing.crashOnCommit"


#: Options read by the JVM shim only (see ``PythonWorker.scala``).
JVM_ONLY_OPTIONS = ("workersPerExecutor",)


#: Read views kept per store: the newest, and the one before it (a reader may still be
#: opening it). Older ones are deleted; an open reader keeps its files through its handles.
VIEWS_KEPT = 2


class _Instance:
    __slots__ = ("store", "lock", "crash_on_commit", "views", "views_dir")

    def __init__(self, store: VersionedStore, crash_on_commit: Optional[str], views_dir: str) -> None:
        self.store = store
        self.crash_on_commit = crash_on_commit
        self.lock = threading.Lock()
        #: (version, path) of exported read views, oldest first
        self.views: list[tuple[int, str]] = []
        self.views_dir = views_dir

    def view(self) -> str:
        """The read view of the loaded version, exported if there is none yet."""
        version = self.store.version
        if self.views and self.views[-1][0] == version:
            return self.views[-1][1]
        path = os.path.join(self.views_dir, f"v{version}-{uuid.uuid4().hex[:12]}")
        self.store.export_view(path)
        self.views.append((version, path))
        while len(self.views) > VIEWS_KEPT:
            _, old = self.views.pop(0)
            shutil.rmtree(old, ignore_errors=True)
        return path

    def drop_views(self) -> None:
        for _, path in self.views:
            shutil.rmtree(path, ignore_errors=True)
        self.views = []


def _maybe_crash(spec: Optional[str], version: int) -> None:
    if not spec:
        return
    target, marker_dir, mode = spec.split(":", 2)
    if int(target) != version:
        return
    if mode == "once":
        try:  # atomic across the executor's workers: exactly one of them crashes
            os.close(os.open(os.path.join(marker_dir, "crash-once"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    else:
        open(os.path.join(marker_dir, f"crash-{os.getpid()}-{time.monotonic_ns()}"), "w").close()
    _LOG.error("fault injection: crashing the worker while committing version %d", version)
    os._exit(99)


def engine_config(options: dict[str, Any]) -> EngineConfig:
    """The engine configuration of a provider instance, from the shim's ``options`` JSON:
    ``engine`` (spark-state options without the conf prefix), ``storage`` (checkpoint
    storage options), ``localDir``, and Spark's own ``minVersionsToRetain`` /
    ``minDeltasForSnapshot`` as defaults for retention and snapshot interval."""
    engine = dict(options.get("engine") or {})
    engine.pop(CRASH_ON_COMMIT_OPTION, None)
    for key in JVM_ONLY_OPTIONS:
        engine.pop(key, None)
    engine.setdefault("retainedVersions", str(options.get("minVersionsToRetain", C.DEFAULT_RETAINED_VERSIONS)))
    engine.setdefault("snapshotInterval", str(options.get("minDeltasForSnapshot", C.DEFAULT_SNAPSHOT_INTERVAL)))
    if options.get("localDir") and "localDir" not in engine:
        engine["localDir"] = str(options["localDir"])
    for key, value in (options.get("storage") or {}).items():
        engine.setdefault("storage." + key, str(value))
    # Validate under the full conf names, so an error names the conf the user actually set.
    config = EngineConfig.from_options({C.CONF_PREFIX + k: v for k, v in engine.items()}, prefix=C.CONF_PREFIX)
    if config.backend != C.BACKEND_ROCKSDB:
        raise ConfigError(
            f"the Spark provider serves reads from the executor JVM through RocksDB, so it needs "
            f"backend 'rocksdb'; got {config.backend!r}. Set "
            f"{C.CONF_PREFIX}backend=rocksdb (the hashmap backend is available to the Python API)"
        )
    return config


class StoreService:
    """Implements the Java interface ``PythonStoreService`` (see ``protocol``)."""

    class Java:
        implements = [SERVICE_INTERFACE]

    def __init__(self) -> None:
        self._instances: dict[str, _Instance] = {}
        self._lock = threading.Lock()

    # --- calls from the shim; each returns a JSON string -------------------------------
    def ping(self) -> str:
        return _reply(lambda: {"pid": os.getpid(), "stores": len(self._instances)})

    def load(self, instance_id: str, checkpoint: str, options_json: str, version: int) -> str:
        def run() -> dict[str, Any]:
            instance = self._instance(instance_id, checkpoint, options_json)
            with instance.lock:
                store = instance.store.load(int(version))
                return _state(store) | {"viewPath": instance.view(), "restore": asdict(store.last_restore)}
        return _reply(run)

    def commit(self, instance_id: str, checkpoint: str, options_json: str, version: int, changes_path: str) -> str:
        def run() -> dict[str, Any]:
            instance = self._instance(instance_id, checkpoint, options_json)
            with instance.lock:
                store = instance.store.load(int(version))  # cached unless the worker restarted
                keys, values, prior = read_changes(changes_path)
                _maybe_crash(instance.crash_on_commit, int(version) + 1)
                store.stage_changes(keys, values, prior)
                store.commit()
                return _state(store) | {"viewPath": instance.view(), "commit": asdict(store.last_commit)}
        return _reply(run)

    def maintenance(self, instance_id: str, kind: str) -> str:
        def run() -> dict[str, Any]:
            instance = self._instances.get(instance_id)
            if instance is None:
                return {"skipped": True}
            with instance.lock:
                if kind == "cleanup":
                    result = instance.store.cleanup()
                    return {"deleted": len(result.deleted)}
                raise ValueError(f"unknown maintenance kind {kind!r}")
        return _reply(run)

    def close(self, instance_id: str) -> str:
        def run() -> dict[str, Any]:
            with self._lock:
                instance = self._instances.pop(instance_id, None)
            if instance is not None:
                with instance.lock:
                    instance.drop_views()
                    instance.store.close()
            return {"closed": instance is not None}
        return _reply(run)

    # --- internals -----------------------------------------------------------------------
    def _instance(self, instance_id: str, checkpoint: str, options_json: str) -> _Instance:
        with self._lock:
            instance = self._instances.get(instance_id)
            if instance is None:
                options = json.loads(options_json)
                config = engine_config(options)
                store = VersionedStore(checkpoint, config)
                crash = (options.get("engine") or {}).get(CRASH_ON_COMMIT_OPTION)
                views_dir = os.path.join(config.local_dir or tempfile.gettempdir(), f"views-{instance_id}")
                instance = self._instances[instance_id] = _Instance(store, crash, views_dir)
                _LOG.info("opened store %s for %s", instance_id, checkpoint)
            return instance


def read_changes(path: str) -> tuple[list[bytes], list[Optional[bytes]], list[int]]:
    """Read a changes file written by the shim (schema in ``protocol``)."""
    with pa.memory_map(path) as source:
        table = pa.ipc.open_file(source).read_all()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    ops = table.column("op").to_pylist()
    prior = table.column("prior").to_pylist()
    values = [None if op == C.OP_DELETE else v for op, v in zip(ops, values)]
    return keys, values, prior


def _state(store: VersionedStore) -> dict[str, Any]:
    return {
        "version": store.version,
        "numKeys": store.num_keys(),
        "memoryBytes": store.memory_bytes(),
    }


def _reply(fn: Callable[[], dict[str, Any]]) -> str:
    started = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:  # the shim turns this into a task failure with this message
        _LOG.warning("store call failed", exc_info=True)
        return json.dumps({
            "error": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(limit=20),
        })
    result["callMs"] = round((time.perf_counter() - started) * 1000, 3)
    return json.dumps(result)
