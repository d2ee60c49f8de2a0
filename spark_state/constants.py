"""Constants shared across spark-state: format versions, file layout names, defaults.

Every magic string or number that names a file or directory on disk lives here, so that the
checkpoint layout can be read off one page. The bytes of stored keys are owned by
:mod:`spark_state.keys` (one module per key layout).
"""

from __future__ import annotations

#: Version of the checkpoint format this release writes. Readers accept the versions in
#: ``SUPPORTED_FORMAT_VERSIONS`` and reject anything else with ``IncompatibleFormatError``.
FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = frozenset({1})

#: Prefix of every SQL conf spark-state reads. Spark passes only explicitly set confs that
#: start with ``spark.sql.streaming.stateStore.`` to a provider, so all of ours live below it.
CONF_PREFIX = "spark.sql.streaming.stateStore.sparkState."

# --- checkpoint layout, relative to one store's root (one operator partition) -------------
#: ``manifests/<version>.json`` -- the commit point of a version (written last, atomically).
MANIFEST_DIR = "manifests"
#: ``changelogs/<version>-<commit id>.arrow`` -- the writes of one epoch, Arrow IPC file format.
CHANGELOG_DIR = "changelogs"
#: ``snapshots/<version>-<snapshot id>.json`` -- a snapshot's descriptor, written after every
#: file it lists; ``snapshots/<version>-<snapshot id>-<name>`` -- its private files.
SNAPSHOT_DIR = "snapshots"
#: ``shared/<version>-<db instance id>-<sst name>`` -- immutable SST files shared between
#: snapshots. The version is the snapshot that first uploaded the file.
SHARED_DIR = "shared"
#: ``runs/<seq>.json`` -- one record per query run that committed (see ``checkpoint.runs``);
#: ``runs/<seq>.fenced`` -- written when that run was found writing beside an older live run.
RUNS_DIR = "runs"

MANIFEST_KIND = "spark-state/manifest"
SNAPSHOT_KIND = "spark-state/snapshot"
RUN_KIND = "spark-state/run"
FENCE_KIND = "spark-state/fence"
#: Rank of commits made without a run (the engine API, and checkpoints of earlier releases):
#: their manifests are ``manifests/<version>.json`` and a re-commit overwrites them.
UNRANKED = 0

# --- backends ------------------------------------------------------------------------------
BACKEND_ROCKSDB = "rocksdb"
BACKEND_HASHMAP = "hashmap"
BACKENDS = (BACKEND_ROCKSDB, BACKEND_HASHMAP)

# --- defaults ------------------------------------------------------------------------------
DEFAULT_BACKEND = BACKEND_ROCKSDB
#: Commits between two snapshots. Restore cost is one snapshot plus at most this many
#: changelogs; Spark's RocksDB provider uses 10 for its changelog checkpointing too.
DEFAULT_SNAPSHOT_INTERVAL = 10
#: A snapshot is also due once the changelogs a restore would replay pass this many bytes (a large
#: epoch, e.g. the first batch after an outage): restores then replay at most about this much.
SNAPSHOT_REPLAY_BYTES = 64 << 20
#: A store's load slower than this (ms) logs one line saying what it waited for (``load.warnAfterMs``).
DEFAULT_LOAD_WARN_AFTER_MS = 10_000
#: Versions kept restorable; Spark's ``spark.sql.streaming.minBatchesToRetain`` default.
DEFAULT_RETAINED_VERSIONS = 100
#: Process-wide RocksDB block cache (shared by every store of the process).
DEFAULT_BLOCK_CACHE_MB = 256
#: Process-wide RocksDB write-buffer (memtable) budget, charged to the block cache.
DEFAULT_WRITE_BUFFER_MB = 128
#: The RocksDB budget of the stores the operations and state-as-data tools open to read committed
#: state (``ops.state_io.reader_config``): their reads are ordered scans, which a small cache
#: serves as well as a large one, and a tool's process holds this much whatever the state's size.
TOOL_BLOCK_CACHE_MB = 32
TOOL_WRITE_BUFFER_MB = 16
#: Nice value of RocksDB's compaction threads (``backends/rocksdb_threads.py``): 19, the lowest
#: priority, as RocksDB's own ``LowerThreadPoolCPUPriority``; 0 leaves them as they are.
DEFAULT_COMPACTION_NICE = 19
MAX_NICE = 19
#: Rows per Arrow record batch in changelogs and hashmap snapshots (bounded memory per batch).
ARROW_BATCH_ROWS = 65536

# --- keyspace -------------------------------------------------------------------------------
#: Stored keys (their first byte, the system keyspace's tags, every layout) are owned by
#: ``spark_state.keys``.
#: Version of the schema record's JSON; readers reject others (``state/schema.py``).
SCHEMA_RECORD_FORMAT = 1

# --- keyed and checkpointed functions' state --------------------------------------------------
#: Their state's default place: ``<query checkpoint>/spark-state/<operator name>/``.
PROCESS_CHECKPOINT_DIR = "spark-state"
#: The legacy place, where the state of a query that started there stays:
#: ``<driver's working directory>/spark-state/<query id>/<operator name>/``.
LEGACY_PROCESS_ROOT_DIR = "spark-state"

# --- time in keyed functions ----------------------------------------------------------------
#: Under a keyed operator's state location: ``time/clock/<B>.json`` (a batch's watermark and
#: processing time) and ``time/watermarks/<B>/<side>.<n>.<i>.<max ms>`` (``process/clock.py``).
TIME_CLOCK_DIR = "time/clock"
TIME_MAXIMA_DIR = "time/watermarks"

# --- changelog record ops -------------------------------------------------------------------
OP_PUT = 0
OP_DELETE = 1

#: Run ids of operations tools (restore, rescale, erasure, ...) start with it: their versions are
#: imported (a snapshot and an empty changelog), not a batch's changes.
TOOL_RUN_PREFIX = "spark-state-ops-"
