"""The store service the JVM shim calls: one :class:`VersionedStore` per provider instance.

Every method takes the provider instance id the shim generated in ``init`` and returns a
JSON string. Stores are opened lazily from the arguments of ``load``, so a worker that was
restarted (after a crash) serves the same instance ids without any extra handshake: it
restores from checkpoint storage.

The JVM reads state without crossing the process boundary, from its own views
(:mod:`.views`): for ``backend=rocksdb`` an exported RocksDB checkpoint (hard-linked immutable
SSTs, no write-ahead log) with the later epochs layered over it, for ``backend=hashmap`` the
state in a JVM hash map. A load exports (or ships) the version only when the JVM does not
hold it already, named by commit id; a commit tells the JVM how to apply the epoch itself.
The worker's store is RocksDB-backed for both, with snapshots taken and uploaded in the
background (``VersionedStore(background_snapshots=True)``): a commit waits for its changelog
and manifest only (the snapshot's local capture, too, is taken after the commit returns).

Why not a RocksDB secondary that tails the live database: after the primary flushes, a
secondary keeps the memtable it replayed from the old log, which shadows the newer values
in the flushed SST, so reads go stale (reproduced with rocksdict 0.3.29 / RocksDB 9.8.4,
and by this project's SIGKILL test). Immutable exports plus immutable layers cannot.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import traceback
from dataclasses import asdict
from typing import Any, Callable, Mapping, Optional

from .. import constants as C
from .. import memory
from ..checkpoint.runs import RunContext, RunRegistry
from ..config import EngineConfig
from ..errors import ConfigError
from ..backends.rocksdb_resources import current_resources
from ..engine.localdirs import process_root
from ..storage import open_storage
from ..engine.store import VersionedStore
from ..testing import crashpoints
from ..ttl import is_stamped
from . import options as provider_options
from . import ttl_policy
from .protocol import SERVICE_INTERFACE
from .change_feed import write_change_feed
from .ttl_commit import NAMESPACE, collect_background, commit_epoch, read_changes_table
from .ttl_policy import StoreTtl
from .views import ViewExporter, commit_id, commit_view

_LOG = logging.getLogger(__name__)


#: Fault injection for tests of worker crashes (see ``provider.options``): the worker exits
#: abruptly in the middle of committing a version -- once per marker dir, or on every attempt.
CRASH_ON_COMMIT_OPTION = provider_options.CRASH_ON_COMMIT


class _Instance:
    __slots__ = ("store", "lock", "crash_on_commit", "views", "ttl", "expired_candidates", "where")

    def __init__(self, store: VersionedStore, crash_on_commit: Optional[str], views: ViewExporter,
                 ttl: StoreTtl, where: str) -> None:
        self.store = store
        self.crash_on_commit = crash_on_commit
        self.ttl = ttl
        self.where = where
        #: (version, [(key, index bucket)]): expired rows background cleanup found in that version
        self.expired_candidates: Optional[tuple[int, list[tuple[bytes, int]]]] = None
        self.lock = threading.Lock()
        self.views = views


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
    _, engine = ttl_policy.split_ttl_options(options.get("engine") or {})
    provider_only, engine = provider_options.split_provider_options(engine)
    provider_options.validate_provider_options(provider_only)
    engine.setdefault("retainedVersions", str(options.get("minVersionsToRetain", C.DEFAULT_RETAINED_VERSIONS)))
    engine.setdefault("snapshotInterval", str(options.get("minDeltasForSnapshot", C.DEFAULT_SNAPSHOT_INTERVAL)))
    if options.get("localDir") and "localDir" not in engine:
        engine["localDir"] = str(options["localDir"])
    # The worker's part of the executor's memory budget (the shim's MemoryBudget.workerShare).
    share = options.get("memoryShareBytes")
    engine = memory.with_process_defaults(engine, int(share) if share is not None else None)
    for key, value in (options.get("storage") or {}).items():
        engine.setdefault("storage." + key, str(value))
    # Validate under the full conf names, so an error names the conf the user actually set.
    try:
        config = EngineConfig.from_options({C.CONF_PREFIX + k: v for k, v in engine.items()}, prefix=C.CONF_PREFIX)
    except ConfigError as exc:
        if not str(exc).startswith("unknown spark-state option"):
            raise
        raise ConfigError(f"{exc}; TTL options: {C.CONF_PREFIX}ttl and {C.CONF_PREFIX}ttl.*") from None
    return config


def worker_config(config: EngineConfig) -> EngineConfig:
    """The configuration of the worker's own store for a provider instance whose session
    configuration is ``config``: the same, in RocksDB. For the provider, ``backend`` (validated
    with every other engine option by :func:`engine_config`) chooses the JVM's views
    (:mod:`.views`, which gets ``config.backend``), not this store: the option table's row
    (:mod:`spark_state.options`) says so. Checkpoints do not depend on the provider backend, so
    a query can switch it at a restart."""
    return dataclasses.replace(config, backend=C.BACKEND_ROCKSDB)


def store_ttl(options: dict[str, Any], storage_options: Optional[Mapping[str, str]] = None) -> StoreTtl:
    """The TTL of the store the shim's ``options`` describe (``engine`` confs, ``operatorId``,
    ``storeName``, ``stateRoot``); raises :class:`ConfigError` for bad TTL confs, including a
    ``ttl.operator.<id>`` for an operator the query does not have."""
    ttl_options, _ = ttl_policy.split_ttl_options(options.get("engine") or {})
    root = options.get("stateRoot")
    if root and any(k.startswith(ttl_policy.OPERATOR_PREFIX) for k in ttl_options):
        _check_operator_overrides(str(root), ttl_options, storage_options or {})
    operator = options.get("operatorId")
    return ttl_policy.resolve(ttl_options, None if operator is None else int(operator),
                              str(options.get("storeName") or ttl_policy.DEFAULT_STORE))


_checked_overrides: set[tuple[str, tuple]] = set()


def _check_operator_overrides(state_root: str, ttl_options: dict[str, str], storage_options: Mapping[str, str]) -> None:
    key = (state_root, tuple(sorted(ttl_options.items())))
    if key in _checked_overrides:
        return
    storage = open_storage(state_root, storage_options)

    def exists(op: int) -> bool:
        # Spark's operator metadata (v1) and the state schema file of partition 0, whichever it wrote.
        return storage.exists(f"{op}/_metadata/metadata") or storage.exists(f"{op}/0/_metadata/schema")

    ttl_policy.check_overrides_name_operators(ttl_options, exists)
    _checked_overrides.add(key)


def ttl_state(instance: _Instance) -> dict[str, Any]:
    """What the JVM needs to read the loaded version: whether values are stamped, and when
    TTL is on, the TTL and the batch's processing time (taken once, here, per load)."""
    store, ttl = instance.store, instance.ttl
    state: dict[str, Any] = {"stamped": is_stamped(store, NAMESPACE), "enabled": ttl.enabled}
    if ttl.config is not None:
        state |= {
            "ttlMs": ttl.config.ttl_ms,
            "nowMs": ttl.now_ms(store.version),
            "returnExpired": ttl.config.return_expired,
            "refreshOnRead": ttl.config.refresh_on_read,
        }
    return state


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

    def load(self, instance_id: str, checkpoint: str, options_json: str, version: int,
             view_json: str = "{}") -> str:
        """Make the instance hold ``version``. ``view_json`` is what the JVM holds of it
        (``{"held": <commit id or null>, "refresh": bool}``): the version is exported for the
        JVM's views only if the loaded version's commit id differs, or on a refresh."""
        def run() -> dict[str, Any]:
            instance = self._instance(instance_id, checkpoint, options_json)
            request = json.loads(view_json or "{}")
            with instance.lock:
                store = instance.store.load(int(version))
                reply = self._state(store) | {"commitId": commit_id(store), "restore": asdict(store.last_restore),
                                         "ttl": ttl_state(instance)}
                if request.get("held") != reply["commitId"] or request.get("refresh"):
                    reply |= instance.views.export(store)
                return reply
        return _reply(run)

    def commit(self, instance_id: str, checkpoint: str, options_json: str, version: int, changes_path: str,
               now_ms: int = -1) -> str:
        """Commit the changes file on top of ``version``. ``now_ms`` is the processing time the
        load reply gave the JVM for this batch (-1: take it now), so that what the JVM saw
        expire and what this commit removes agree."""
        def run() -> dict[str, Any]:
            instance = self._instance(instance_id, checkpoint, options_json)
            with instance.lock:
                store = instance.store.load(int(version))  # cached unless the worker restarted
                changes = read_changes_table(changes_path)
                _maybe_crash(instance.crash_on_commit, int(version) + 1)
                ttl = instance.ttl
                now = int(now_ms) if int(now_ms) >= 0 else ttl.now_ms(store.version)
                background, instance.expired_candidates = instance.expired_candidates, None
                candidates = background[1] if background and background[0] == store.version else None
                with instance.views.expired_keys() as expired:
                    epoch = commit_epoch(store, ttl, changes, now, candidates, instance.where, expired)
                    view = commit_view(store, stamped=ttl.enabled, stamp_ms=now,
                                       layout_changed=epoch.layout_changed and epoch.migrated > 0, expired=expired)
                return self._state(store) | {"commitId": commit_id(store), "commit": asdict(store.last_commit),
                                        "ttl": ttl_state(instance) | asdict(epoch), "view": view}
        return _reply(run)

    def maintenance(self, instance_id: str, kind: str) -> str:
        def run() -> dict[str, Any]:
            instance = self._instances.get(instance_id)
            if instance is None:
                return {"skipped": True}
            with instance.lock:
                if kind == "cleanup":
                    crashpoints.reached("provider.maintenance")
                    result = instance.store.cleanup()
                    reply: dict[str, Any] = {"deleted": len(result.deleted)}
                    store = instance.store
                    if instance.ttl.enabled and _is_loaded(store) and not store.has_uncommitted_changes:
                        # Background TTL cleanup: find expired rows now, between batches; the
                        # next commit on top of this version removes them.
                        found = collect_background(store, instance.ttl)
                        instance.expired_candidates = (store.version, found) if found else None
                        reply["ttlExpiredFound"] = len(found)
                    return reply
                raise ValueError(f"unknown maintenance kind {kind!r}")
        return _reply(run)

    def changes(self, checkpoint: str, options_json: str, start_version: int, end_version: int,
                out_path: str) -> str:
        """Write the changes versions ``start_version..end_version`` of the store at ``checkpoint``
        made into the Arrow file ``out_path`` (see ``protocol``: the change feed file), reading
        committed copies only (Spark's ``statestore`` reader with ``readChangeFeed``)."""
        def run() -> dict[str, Any]:
            config = engine_config(json.loads(options_json))
            storage = open_storage(checkpoint, config.storage_options)
            store = VersionedStore(storage, worker_config(config), runs=RunContext(RunRegistry(storage), None))
            try:
                return {"rows": write_change_feed(store, int(start_version), int(end_version), out_path)}
            finally:
                store.close()
        return _reply(run)

    def close(self, instance_id: str) -> str:
        def run() -> dict[str, Any]:
            with self._lock:
                instance = self._instances.pop(instance_id, None)
            if instance is not None:
                with instance.lock:
                    instance.views.close()
                    instance.store.close()
            return {"closed": instance is not None}
        return _reply(run)

    # --- internals -----------------------------------------------------------------------
    def _state(self, store: VersionedStore) -> dict[str, Any]:
        """The loaded version, its key count, and ``memoryBytes``: this store's share of the worker's
        RocksDB memory -- the process-wide block cache's usage (memtables, index and filter blocks
        are charged to it) split evenly between the worker's open stores -- so that the shares of a
        worker's stores add up to what its RocksDB holds."""
        resources = current_resources()
        memory = resources.usage_bytes() // max(1, len(self._instances)) if resources is not None else \
            store.memory_bytes()
        return {"version": store.version, "numKeys": store.num_keys(), "memoryBytes": memory}

    def _instance(self, instance_id: str, checkpoint: str, options_json: str) -> _Instance:
        with self._lock:
            instance = self._instances.get(instance_id)
            if instance is None:
                options = json.loads(options_json)
                config = engine_config(options)
                ttl = store_ttl(options, config.storage_options)
                # Each store keeps its own run registry: ranked commits, first committer wins,
                # abandoned attempts never read, a second writer fenced (checkpoint.runs).
                storage = open_storage(checkpoint, config.storage_options)
                runs = RunContext(RunRegistry(storage), options.get("runId"))
                store = VersionedStore(storage, worker_config(config), runs=runs, background_snapshots=True)
                crash = (options.get("engine") or {}).get(CRASH_ON_COMMIT_OPTION)
                batch_rows = int((options.get("engine") or {}).get(provider_options.EXPIRED_BATCH_ROWS, 0))
                # Views live in the worker's own local directory: if the worker is killed, its
                # successor removes them with the dead worker's store copies (localdirs).
                views = ViewExporter(config.backend, os.path.join(process_root(config.local_dir),
                                                                  f"views-{instance_id}"), batch_rows)
                instance = self._instances[instance_id] = _Instance(store, crash, views, ttl, checkpoint)
                _LOG.info("opened store %s for %s (backend=%s: JVM views; %s)", instance_id, checkpoint,
                          config.backend, ttl.config.describe() if ttl.config else ttl.exempt_reason or "no TTL")
            return instance


def _is_loaded(store: VersionedStore) -> bool:
    try:
        _ = store.version  # raises when not loaded
    except Exception:  # never loaded, or invalidated by a failed commit
        return False
    return True




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
