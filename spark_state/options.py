"""Every option spark-state reads, in one table: name, default, meaning, and who reads it.

Why one table: options are read in five places (the engine's :class:`~spark_state.config.EngineConfig`,
checkpoint storage, the provider's TTL policy, the JVM shim, the Python API), and a reference
written by hand beside them drifts. This module is the reference: ``docs/configuration.md`` is
generated from it (``python tools/docgen.py``, checked by ``tests/unit/test_docs_generated.py``),
the engine derives its option parser from it (:data:`spark_state.config._OPTIONS`), storage
derives its lists of valid keys from it (``S3_OPTIONS``, ``RETRY_OPTIONS``), and
``tests/unit/test_options_registry.py`` checks that the readers that keep their own names
(``provider/ttl_policy.py``, ``provider/options.py``, the shim's Scala) and every default
agree with it. Adding an option means adding a row here; the tests say what else to touch.

Who reads what (:attr:`Group.readers`): the provider (Spark's stateful operators) reads every
group but the Python API's; the keyed functions (``keyed_process`` & co.) read the session's
engine and storage options, with their ``engine=`` / ``storage_options=`` arguments overriding
them key by key (:func:`keyed_session_options` selects them), and the Python API's own
``process.*`` confs; they ignore the TTL and provider groups. Unknown names are handed to the
engine, which rejects them naming the conf.

Names are relative to :data:`~spark_state.constants.CONF_PREFIX`
(``spark.sql.streaming.stateStore.sparkState.``), the way they are passed to
``spark_state.configure(builder, options={...})`` and :meth:`EngineConfig.from_options`.
Storage options carry the ``storage.`` prefix there and go without it in ``storage_options=``
and ``--storage-option`` (``storage.s3.endpoint_url`` -> ``s3.endpoint_url``).

This module imports nothing but :mod:`spark_state.constants`, so any layer can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from . import constants as C

__all__ = ["ENV_VARS", "FALSE_WORDS", "GROUPS", "KEYED", "OPTIONS", "PROVIDER", "READERS", "TRUE_WORDS", "EnvVar",
           "Group", "OptionSpec", "by_group", "find", "keyed_session_options", "parse_bool", "spec"]

#: The words a boolean option takes, in any case and with spaces around: every reader of options
#: (the engine, storage, the provider's TTL policy and its own options, the data sources; the
#: shim's ``SparkStatePlugin.parseBool`` for the JVM's, with the same words) parses them with :func:`parse_bool`.
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def parse_bool(raw: object) -> Optional[bool]:
    """The boolean ``raw`` spells (:data:`TRUE_WORDS`, :data:`FALSE_WORDS`), None if it spells
    neither (the caller's error names the option and what was given)."""
    word = str(raw).strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None

#: Prefix of the storage options inside the engine's options (stripped for ``storage_options=``).
STORAGE_PREFIX = "storage."
#: Readers of options (:attr:`Group.readers`): Spark's stateful operators on spark-state's provider
#: (its JVM shim and Python workers), and the keyed functions of :mod:`spark_state.process`.
PROVIDER = "provider"
KEYED = "keyed functions"
READERS = (PROVIDER, KEYED)


@dataclass(frozen=True)
class Group:
    """A section of the reference: who reads the options, and when."""

    name: str
    title: str
    #: Markdown shown under the section's heading.
    intro: str
    #: who reads the group's options from the session's confs (:data:`PROVIDER`, :data:`KEYED`)
    readers: tuple[str, ...] = READERS
    #: names this group owns beyond its rows: ``<namespace>`` and ``<namespace>.*`` (its reader
    #: validates them, so a typo there is its error, not the engine's)
    namespace: str = ""


@dataclass(frozen=True)
class OptionSpec:
    """One option.

    Attributes:
        key: the name relative to the conf prefix; ``<...>`` marks a part the user fills in
            (``ttl.operator.<operatorId>``, ``storage.hdfs.<hadoop key>``).
        group: the :class:`Group` name.
        meaning: Markdown, one paragraph.
        default: the default as shown to users (Markdown); ``""`` for none.
        field: the Python name that carries it: an :class:`EngineConfig` field for engine
            options, else ``None``.
        kind: how the engine parses it (``int``, ``bool``, ``str``, ``size``: bytes as Spark writes
            them, ``64m``); only engine options use it.
        testing_only: a fault-injection or test hook; never set it in production.
        choices: the values the engine accepts (exactly, after stripping blanks); empty: any
            value of ``kind``.
    """

    key: str
    group: str
    meaning: str
    default: str = ""
    field: Optional[str] = None
    kind: str = "str"
    testing_only: bool = False
    choices: tuple[str, ...] = ()

    @property
    def conf(self) -> str:
        """The full Spark SQL conf name."""
        return C.CONF_PREFIX + self.key

    @property
    def storage_key(self) -> str:
        """For storage options: the key in ``storage_options=`` (without ``storage.``)."""
        if not self.key.startswith(STORAGE_PREFIX):
            raise ValueError(f"{self.key} is not a storage option")
        return self.key[len(STORAGE_PREFIX):]


@dataclass(frozen=True)
class EnvVar:
    """An environment variable spark-state reads."""

    name: str
    meaning: str
    default: str = ""
    testing_only: bool = False


GROUPS: tuple[Group, ...] = (
    Group("engine", "Engine", (
        "Read by the engine (`EngineConfig`), i.e. by every store: the provider's and the keyed "
        "functions' (`keyed_process`, `keyed_co_process`, `keyed_broadcast_process`, "
        "`checkpointed_process`) from the session's confs, and the engine API's from its arguments. "
        "A keyed function reads the session's confs on the driver when it is called; its `engine=` "
        "argument overrides them key by key (a mapping), or wholly (an `EngineConfig`). Unknown options "
        "and bad values are errors that name the option (the conf, for a session conf), raised by "
        "`spark_state.configure`, by the keyed function's call, or by the provider when a query starts. "
        "The provider takes `retainedVersions` and `snapshotInterval` from Spark's "
        "`spark.sql.streaming.minBatchesToRetain` and `spark.sql.streaming.stateStore.minDeltasForSnapshot` "
        "when they are not set; a keyed function from the defaults below.")),
    Group("storage", "Checkpoint storage", (
        "Read by checkpoint storage (`spark_state.storage.open_storage`): the provider's and the keyed "
        "functions'. As confs and in `engine=` "
        "options they carry the `storage.` prefix; in `storage_options=` (the Python API and "
        "`VersionedStore`) and the command line's `--storage-option KEY=VALUE` they go without it. A keyed "
        "function takes the session's, then its `engine=` argument's, then its `storage_options=`, each "
        "overriding the one before key by key. On the "
        "provider with an `s3a://` checkpoint, `s3.endpoint_url`, the credentials and the region also "
        "come from Hadoop's `fs.s3a.*` settings. Local disk accepts the `retry.*` options and ignores "
        "them (a full or read-only disk does not pass by waiting). An unknown name and a bad `retry.*`, "
        "`s3.anonymous` or `s3.*_timeout` value are errors naming the option when the options are read "
        "(`spark_state.configure(options=...)`, `spark-state server-conf`, `EngineConfig.from_options`), "
        "not when a query first opens its storage.")),
    Group("ttl", "TTL for built-in operators", (
        "Read by the provider when a query (re)starts (`spark_state/provider/ttl_policy.py`); "
        "see [TTL for built-in operators](ttl.md#ttl-for-built-in-operators). Every TTL conf is "
        "validated for every store, so a typo fails the query at once. Keyed functions ignore these "
        "confs: their state takes its TTL from its descriptors ([State TTL](ttl.md#state-ttl))."),
          readers=(PROVIDER,), namespace="ttl"),
    Group("memory", "Memory", (
        "The executor's one state memory budget ([Memory](memory.md)): read from the executor's Spark "
        "conf by the provider's JVM shim when the executor starts, and on the driver by each keyed "
        "function's call, which hands its Python processes their part. Set it when the session starts "
        "(a builder conf, `spark-submit --conf`, or `spark_state.configure(options=...)`).")),
    Group("provider", "Provider", (
        "Read by the provider's JVM shim or its Python workers, not by the engine; keyed functions "
        "ignore them. `spark_state.configure(options=...)` validates them before the session starts."),
          readers=(PROVIDER,)),
    Group("process", "Python API", (
        "Session confs read on the driver by `keyed_process` / `checkpointed_process` "
        "(see [Keyed and operator state](keyed-functions.md), 'Where the state lives'); the provider "
        "ignores them."), readers=(KEYED,)),
)

OPTIONS: tuple[OptionSpec, ...] = (
    # --- engine ---------------------------------------------------------------------------------
    OptionSpec("backend", "engine", field="backend", default=f"`{C.DEFAULT_BACKEND}`", choices=C.BACKENDS,
               meaning=(
        "`rocksdb` (rocksdict; state may exceed memory) or `hashmap` (a dict; fastest, must fit in "
        "memory): the store's backend for keyed functions and the engine API. For the provider it "
        "chooses where the executor JVM reads state from (a RocksDB view or its heap; see "
        "[Provider backends](provider-backends.md)), while the provider's Python worker keeps its "
        "store in RocksDB with either; the checkpoint format is the same. "
        "A query can switch backend on restart: a snapshot written by one backend is converted on "
        "restore.")),
    OptionSpec("snapshotInterval", "engine", field="snapshot_interval", kind="int",
               default=(f"`{C.DEFAULT_SNAPSHOT_INTERVAL}`; on the provider, Spark's "
                        "`spark.sql.streaming.stateStore.minDeltasForSnapshot` (itself 10 unless set)"),
               meaning=(
                   "commits between snapshots; `0` = only on `snapshot()` (restores then replay every "
                   "changelog since version 0)")),
    OptionSpec("retainedVersions", "engine", field="retained_versions", kind="int",
               default=(f"`{C.DEFAULT_RETAINED_VERSIONS}`; on the provider, Spark's "
                        "`spark.sql.streaming.minBatchesToRetain` (itself 100 unless set)"),
               meaning=(
                   "newest versions kept restorable (Spark's `minBatchesToRetain`); older files are "
                   "removed by cleanup")),
    OptionSpec("localDir", "engine", field="local_dir", default="a temp dir", meaning=(
        "parent of the local working copies; it holds one `spark-state-*` directory per process, "
        "locked by its process; a process that starts removes those whose process is gone, however "
        "it died")),
    OptionSpec("rocksdb.blockCacheSizeMB", "engine", field="block_cache_mb", kind="int",
               default=f"`{C.DEFAULT_BLOCK_CACHE_MB}` for the engine API; for the provider's workers and keyed "
                       "functions, half of their process's part of `memory.budget`",
               meaning="block cache shared by **all** RocksDB stores of the process"),
    OptionSpec("rocksdb.writeBufferManagerMB", "engine", field="write_buffer_mb", kind="int",
               default=f"`{C.DEFAULT_WRITE_BUFFER_MB}` for the engine API; for the provider's workers and keyed "
                       "functions, a quarter of their process's part of `memory.budget`", meaning=(
                   "memtable budget, charged to that cache (must not exceed `rocksdb.blockCacheSizeMB`); "
                   "setting this or `rocksdb.blockCacheSizeMB` sets both as the defaults say")),
    OptionSpec("rocksdb.compactionNice", "engine", field="compaction_nice", kind="int",
               default=f"`{C.DEFAULT_COMPACTION_NICE}`", meaning=(
                   "nice value (0-19, Linux) of RocksDB's compaction threads, so compactions use the "
                   "CPU tasks leave idle instead of slowing a batch; `0` leaves them as they are. "
                   "Process-wide: the lowest priority any store asks for wins")),
    OptionSpec("rocksdb.writeAheadLog", "engine", field="rocksdb_wal", kind="bool", default="`false`",
               meaning="RocksDB's own WAL (our changelog already makes commits durable)"),
    OptionSpec("load.warnAfterMs", "engine", field="load_warn_after_ms", kind="int",
               default=f"`{C.DEFAULT_LOAD_WARN_AFTER_MS}`", meaning=(
                   "a store's load that takes longer (milliseconds) logs one line at WARN level saying what it "
                   "waited for: the restore from checkpoint storage (snapshot files and bytes fetched or linked, "
                   "changelogs replayed) and, on the provider, the JVM's view; `0` logs none. Every load's "
                   "figures are in the query's progress either way")),
    OptionSpec("memory.spillThreshold", "engine", field="spill_threshold_bytes", kind="size",
               default="`64m` for the engine API; for the provider and keyed functions, their part of "
                       "`memory.budget`", meaning=(
                   "memory one store's pending writes of an epoch may hold (`64m`, `1g` or bytes) before "
                   "they spill to local disk as sorted runs; reads, scans and the commit see them there. "
                   "For the provider this is the executor JVM's heap per store (default: the budget's heap "
                   "part, a twelfth of `memory.budget`, over the executor's task slots), for keyed functions "
                   "the Python process's (half of its part); set, it overrides that part for the stores of "
                   "the session or call that sets it")),
    # --- checkpoint storage ---------------------------------------------------------------------
    OptionSpec("storage.retry.attempts", "storage", default="`8`", meaning=(
        "attempts of one checkpoint storage operation in total after transient faults; `1` = no "
        "retries (see [Storage faults](checkpoints-and-storage.md#storage-faults))")),
    OptionSpec("storage.retry.baseDelayMs", "storage", default="`100`", meaning=(
        "backoff base: the wait before retry *n* is uniform in "
        "[0, min(maxDelayMs, baseDelayMs·2^(n−1))]")),
    OptionSpec("storage.retry.maxDelayMs", "storage", default="`5000`",
               meaning="longest wait between two attempts (ms)"),
    OptionSpec("storage.retry.timeoutMs", "storage", default="`30000`",
               meaning="no retry starts later than this after an operation's first attempt (ms)"),
    OptionSpec("storage.s3.endpoint_url", "storage", default="AWS", meaning=(
        "S3 endpoint URL, e.g. `http://127.0.0.1:5055` for MinIO or moto")),
    OptionSpec("storage.s3.access_key_id", "storage", default="the AWS credential chain",
               meaning="access key id"),
    OptionSpec("storage.s3.secret_access_key", "storage", default="the AWS credential chain",
               meaning="secret access key"),
    OptionSpec("storage.s3.session_token", "storage", meaning="session token for temporary credentials"),
    OptionSpec("storage.s3.region", "storage", meaning="region name, e.g. `eu-west-1`"),
    OptionSpec("storage.s3.anonymous", "storage", default="`false`",
               meaning="`true` for unsigned requests (public buckets)"),
    OptionSpec("storage.s3.connect_timeout", "storage", default="`5`", meaning=(
        "seconds to wait for a connection, per HTTP attempt; a timed-out attempt is retried")),
    OptionSpec("storage.s3.read_timeout", "storage", default="`60`", meaning=(
        "seconds to wait for data on a connection, per HTTP attempt; a timed-out attempt is retried")),
    OptionSpec("storage.hdfs.<hadoop key>", "storage", meaning=(
        "any Hadoop configuration key for hdfs-native, with `hdfs.` stripped (e.g. "
        "`hdfs.dfs.ha.namenodes.ns1=nn1,nn2`, `hdfs.dfs.client.failover.max.attempts=15`); overrides "
        "`HADOOP_CONF_DIR`. Unless set, connection attempts are capped so that an unreachable NameNode "
        "fails within about a second")),
    # --- TTL for built-in operators (provider) --------------------------------------------------
    OptionSpec("ttl", "ttl", default="off", meaning=(
        "default TTL of every stateful operator: `10 minutes`, `90s`, `1h`, `1500ms`; `none` = off. "
        "Stream-stream joins never get TTL (the default skips them)")),
    OptionSpec("ttl.operator.<operatorId>", "ttl", meaning=(
        "this operator's TTL, or `none` to exempt it from the default; the id is the `operatorId` "
        "column of `spark.read.format(\"state-metadata\").load(<checkpoint>)`. Targeting a join fails "
        "the query")),
    OptionSpec("ttl.updateType", "ttl", default="`OnCreateAndWrite`", meaning=(
        "what refreshes a row's time: writes; `OnReadAndWrite`: also point reads (a duplicate in "
        "`dropDuplicates`, an aggregation or `flatMapGroupsWithState` reading a key). Scans never "
        "refresh (eviction, complete mode, the state reader visit every row).")),
    OptionSpec("ttl.visibility", "ttl", default="`NeverReturnExpired`", meaning=(
        "`ReturnExpiredIfNotCleanedUp`: an expired row still stored may be returned")),
    OptionSpec("ttl.cleanupSize", "ttl", default="`100000`", meaning=(
        "expired rows removed per commit at most, found through the expiry index; `0`: none")),
    OptionSpec("ttl.fullSnapshotCleanup", "ttl", default="`false`",
               meaning="a commit that takes a snapshot first removes every expired row"),
    OptionSpec("ttl.backgroundCleanup", "ttl", default="`true`", meaning=(
        "maintenance (every `spark.sql.streaming.stateStore.maintenanceInterval`) finds expired rows "
        "between batches; the next commit removes them")),
    OptionSpec("ttl.testing.clock", "ttl", default="`system`", testing_only=True, meaning=(
        "`batch:<stepMs>` makes processing time = loaded version × stepMs, for deterministic tests")),
    # --- provider -------------------------------------------------------------------------------
    OptionSpec("workersPerExecutor", "provider", default=(
        "one per executor core (`spark.executor.cores`, else the machine's processors), at most 4"), meaning=(
        "Python workers per executor (1 to 64); read by the shim (`PythonWorker.scala`) from the Spark "
        "conf when the executor starts its first worker")),
    OptionSpec("prestartWorkers", "provider", default="`true`", meaning=(
        "the executor's Python workers start when the executor starts (the plugin `configure` adds to "
        "`spark.plugins`), so the first batch does not wait for them; `false`: at the first store load")),
    OptionSpec("heap.maxBytes", "provider", default=(
        "the budget's heap maps part: two thirds of `memory.budget`, half the executor's memory"), meaning=(
        "`backend=hashmap`: the executor-wide budget of heap state (`512m`, `2g` or bytes), the heap "
        "all `hashmap` stores of the executor hold together; a store that would grow past it fails its "
        "task naming this conf (see provider-backends.md). Set, it overrides the heap maps part for "
        "the stores of the session that sets it")),
    OptionSpec("rocksdb.viewLayers.maxEpochs", "provider", default="`16`", meaning=(
        "`backend=rocksdb`: committed epochs the JVM layers over its exported RocksDB view before the "
        "next load asks the worker for a fresh export")),
    OptionSpec("rocksdb.viewLayers.maxBytes", "provider", default=(
        "the budget's heap part: a twelfth of `memory.budget`, 64 MB of a 1 GB executor"), meaning=(
        "`backend=rocksdb`: bytes of layered epochs per store before a fresh export (`64m`, `1g` or "
        "bytes); every store's layers and pending writes together stay within the heap part (with "
        "half the heap maps' part while no `hashmap` store is open; see Memory) either way, pending "
        "writes first. Set, it overrides the part for the stores of the session that sets it")),
    OptionSpec("testing.crashOnCommit", "provider", testing_only=True, meaning=(
        "`<version>:<dir>:once|always` makes a worker exit while committing `<version>`")),
    OptionSpec("testing.expiredKeysBatchRows", "provider", default="`8192`", testing_only=True, meaning=(
        "keys per record batch of the file of keys a commit's TTL expiry deleted; the JVM applies 8 "
        "batches at most, past them it reloads the version")),
    # --- memory -----------------------------------------------------------------------------------
    OptionSpec("memory.budget", "memory", default="three quarters of the executor's memory, at least 192 MB",
               meaning=(
        "the state memory of one executor (`256m`, `2g` or bytes), computed once when it starts, in "
        "twelfths: 8 for the heap maps (`backend=hashmap`'s state in the JVM heap; `heap.maxBytes` "
        "overrides it); 1 for the provider's pending writes and read-view layers in the JVM heap "
        "(`memory.spillThreshold` and `rocksdb.viewLayers.maxBytes` override the per-store shares); 1 "
        "for the JVM's RocksDB block cache; 1 for the provider's Python workers (split between them); 1 "
        "for keyed functions' Python processes (split between the task slots). The executor's memory is "
        "`spark.executor.memory`, or `spark.driver.memory` in local mode (`local`, `local[n]`)")),
    # --- Python API -----------------------------------------------------------------------------
    OptionSpec("process.root", "process", default="unset: beside the query's checkpoint",
               meaning=(
                   "root of the state of `keyed_process` / `checkpointed_process` calls without "
                   "`state_location=` or `state_root=`: `<root>/<query id>/<name>`; unset, their state "
                   "lives beside the query's checkpoint, `<checkpoint>/spark-state/<name>`")),
)

ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("SPARK_STATE_CACHE_DIR", default="`~/.cache/spark-state`",
           meaning="where the JVM shim jar built on first use is cached"),
    EnvVar("SPARK_STATE_LOG_LEVEL", default="`INFO`",
           meaning=(
               "log level of the provider's Python workers; they log to `worker-<slot>-<n>.log` in a "
               "`spark-state-*` directory under the executor's local dir (`spark.local.dir`). Workers inherit "
               "the executor's environment: on a cluster set `spark.executorEnv.SPARK_STATE_LOG_LEVEL`")),
    EnvVar("PYSPARK_PYTHON", default="`python3`", meaning=(
        "the executors' Python when `spark.pyspark.python` is unset; it must have spark-state installed "
        "(`spark_state.configure` sets both to the driver's interpreter)")),
    EnvVar("SPARK_STATE_TESTING_CRASH_POINTS", testing_only=True, meaning=(
        "schedules SIGKILLs at named points of commits, snapshots and cleanup (see "
        "[Reliability](reliability.md#kill-test))")),
    EnvVar("SPARK_STATE_TESTING_RESCALE_EXIT_AFTER_STORES", testing_only=True, meaning=(
        "makes `rescale` exit after writing this many stores (tests of an interrupted rescale)")),
)


def spec(key: str) -> OptionSpec:
    """The option named ``key`` (relative to the conf prefix); ``KeyError`` if there is none."""
    for option in OPTIONS:
        if option.key == key:
            return option
    raise KeyError(key)


def find(key: str) -> Optional[OptionSpec]:
    """The option ``key`` (relative to the conf prefix) is an instance of, patterns included
    (``storage.hdfs.dfs.nameservices`` -> ``storage.hdfs.<hadoop key>``); ``None`` if none."""
    for option in OPTIONS:
        head, sep, _ = option.key.partition("<")
        if option.key == key or (sep and key.startswith(head) and len(key) > len(head)):
            return option
    return None


def group_of(key: str) -> Optional[Group]:
    """The :class:`Group` of the option ``key`` (patterns included); ``None`` for an unknown name."""
    option = find(key)
    if option is not None:
        return next(g for g in GROUPS if g.name == option.group)
    return next((g for g in GROUPS if g.namespace and (key == g.namespace or key.startswith(g.namespace + "."))),
                None)


def keyed_session_options(confs: Mapping[str, str], prefix: str = C.CONF_PREFIX) -> dict[str, str]:
    """The session confs a keyed function reads as engine options: those under ``prefix`` whose
    group keyed functions read, except the Python API's own (``process.*``, read by their
    owner), plus unknown names (the engine rejects them naming the conf). Keys keep ``prefix``,
    so that errors name the conf as set."""
    out = {}
    for full_key, value in confs.items():
        if not full_key.startswith(prefix):
            continue
        group = group_of(full_key[len(prefix):])
        if group is None or (KEYED in group.readers and group.name != "process"):
            out[full_key] = str(value)
    return out


def by_group(group: str) -> tuple[OptionSpec, ...]:
    """The options of one group, in table order."""
    return tuple(o for o in OPTIONS if o.group == group)


def engine_options() -> dict[str, tuple[str, str]]:
    """Engine option name -> (``EngineConfig`` field, kind), for :mod:`spark_state.config`."""
    out = {}
    for o in by_group("engine"):
        if o.field is not None:
            out[o.key] = (o.field, o.kind)
    return out


def storage_options(prefix: str) -> dict[str, str]:
    """Storage option keys (without ``storage.``) starting with ``prefix`` -> meaning."""
    out = {}
    for o in by_group("storage"):
        if "<" not in o.key and o.storage_key.startswith(prefix):
            out[o.storage_key] = o.meaning
    return out


def read_elsewhere(key: str) -> bool:
    """Whether ``key`` is a session conf the engine does not read (the Python API's, the memory
    budget's), so that :meth:`EngineConfig.from_options` skips it rather than calling it unknown."""
    return any(o.key == key for o in by_group("process") + by_group("memory"))
