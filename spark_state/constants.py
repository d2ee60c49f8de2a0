"""Constants shared across spark-state: format versions, file layout names, defaults.

Every magic string or number that names something on disk lives here, so that the
checkpoint layout can be read off one page.
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
#: Versions kept restorable; Spark's ``spark.sql.streaming.minBatchesToRetain`` default.
DEFAULT_RETAINED_VERSIONS = 100
#: Process-wide RocksDB block cache (shared by every store of the process).
DEFAULT_BLOCK_CACHE_MB = 256
#: Process-wide RocksDB write-buffer (memtable) budget, charged to the block cache.
DEFAULT_WRITE_BUFFER_MB = 128
#: Nice value of RocksDB's compaction threads (``backends/rocksdb_threads.py``): 19, the lowest
#: priority, as RocksDB's own ``LowerThreadPoolCPUPriority``; 0 leaves them as they are.
DEFAULT_COMPACTION_NICE = 19
MAX_NICE = 19
#: Rows per Arrow record batch in changelogs and hashmap snapshots (bounded memory per batch).
ARROW_BATCH_ROWS = 65536

# --- keyspace -------------------------------------------------------------------------------
#: First byte of engine-owned keys (TTL expiry index, format markers). Data keys never start
#: with it: key-group-prefixed keys begin with a big-endian key group below 32768 (<= 0x7F).
#: ``VersionedStore.num_keys`` does not count these keys.
SYSTEM_KEY_PREFIX = b"\xff"
#: Second byte of system keys: what kind of engine record follows.
#: ``[0xFF][0x01][len ns][ns][bucket ms][data key]`` -- TTL expiry index (``ttl/codec.py``).
TTL_INDEX_TAG = b"\x01"
#: ``[0xFF][0x02][len ns][ns]`` -- TTL format marker: the namespace's values are stamped.
TTL_MARKER_TAG = b"\x02"
#: ``[0xFF][0x03][len name][name]`` -- schema record of a keyed state (``state/schema.py``).
KEYED_SCHEMA_TAG = b"\x03"
#: ``[0xFF][0x04][len name][name]`` -- schema record of an operator state (``state/schema.py``).
OPERATOR_SCHEMA_TAG = b"\x04"
#: Version of the schema record's JSON; readers reject others (``state/schema.py``).
SCHEMA_RECORD_FORMAT = 1

# --- operator state (process/operator_state.py) ---------------------------------------------
#: First byte of an operator state's data keys: how it is redistributed on rescale.
OPERATOR_MODE_SPLIT = 1      # list state, even-split
OPERATOR_MODE_UNION = 2      # union list state
OPERATOR_MODE_BROADCAST = 3  # broadcast (map) state
#: First byte of operator-state keys in a *keyed* function's store, before the mode byte:
#: never a key group's first byte (<= 0x7F) nor the system prefix (0xFF).
KEYED_OPERATOR_STATE_PREFIX = b"\xfe"
#: Each mode's ``kind`` in the operator state's schema record.
OPERATOR_MODE_KINDS = {OPERATOR_MODE_SPLIT: "list", OPERATOR_MODE_UNION: "union",
                       OPERATOR_MODE_BROADCAST: "broadcast"}

# --- time in keyed functions ----------------------------------------------------------------
#: Reserved keyed-state name timers are stored under, in each key group (``state/timers.py``);
#: not valid UTF-8, so no user state name can equal it.
TIMER_STATE_NAME = b"\xffT"
#: Timer domains (the byte after the name part).
TIMER_DOMAIN_EVENT_TIME = 0
TIMER_DOMAIN_PROCESSING_TIME = 1
#: Under a keyed operator's state location: ``time/clock/<B>.json`` (a batch's watermark and
#: processing time) and ``time/watermarks/<B>/<side>.<n>.<i>.<max ms>`` (``process/clock.py``).
TIME_CLOCK_DIR = "time/clock"
TIME_MAXIMA_DIR = "time/watermarks"

# --- changelog record ops -------------------------------------------------------------------
OP_PUT = 0
OP_DELETE = 1
