"""Where a process operator keeps its state, and which layout holds a version.

Resolving the location (:func:`locate`, in each task; docs/keyed-functions.md gives the rules to
users): ``state_location`` as is; else ``<root>/<query id>/<name>`` under ``state_root`` (or the
SQL conf ``spark.sql.streaming.stateStore.sparkState.process.root``); else beside the checkpoint,
``<checkpoint root>/spark-state/<name>``, the root being the task local property
:data:`CHECKPOINT_ROOT_PROPERTY` that spark-state's tick source sets (:mod:`.ticks`). State under
the legacy default, ``./spark-state/<query id>/<name>`` of the driver's working directory, is
used while the checkpoint has none (with a one-line notice). A location that executors on several
hosts cannot share fails with :class:`~.errors.StateVersionMissingError` naming it, instead of
starting empty.

Layout of one state location (one operator)::

    _operator.json               {"format": 1, "kind": "keyed"|"operator", "max_parallelism": 128|null,
                                  "key": {"columns": ["user"], "types": ["string"]}}   (keyed only)
    layouts/p<n>-b<base>.json    one file per layout ever used (create-if-absent, never changed)
    runs/<seq>.json              the query runs that committed here (spark_state.checkpoint.runs)
    stores/p<n>-b<base>/<i>/     partition i's VersionedStore (manifests/, changelogs/, ...)

A *layout* is the set of ``n`` partition stores a parallelism ``n`` writes, starting at batch
version ``base``. Store version ``s`` of a layout holds batch version ``base + s``: the state
after batch ``base + s - 1``. Batch ``B`` loads batch version ``B`` and commits ``B + 1``. The
first batch uses layout ``(n, 0)``; a rescale at batch ``B`` creates layout ``(n, B)``, whose
store version 0 is empty: the task copies batch version ``B`` from the old layout into the
pending epoch and commits store version 1. A layout therefore *holds* batch versions
``base + 1`` on.

Choosing the layout for batch version ``V > 0`` (:func:`choose_layout`): copies of ``V`` may
exist in several layouts (a batch that failed part-way, re-run after a restart at another
parallelism); the run history (:mod:`spark_state.checkpoint.runs`) says which is committed. Among
layouts with ``base < V``, take the one whose copy of ``V`` is valid: loaded at the current
parallelism, rescaled from at another. Copies made without a run rank lowest; among those, the
newest base, then the current parallelism, wins.

``_operator.json`` records the max parallelism and the key columns' names and Spark types (the
readers of :mod:`spark_state.state_data` hash keys with them); a run with another value fails
(:class:`MaxParallelismMismatchError`, :class:`StateLocationError`: its keys would go to other
key groups). A location written before the key was recorded gets it from the next run.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .. import constants as C
from ..checkpoint.retention import list_copies
from ..checkpoint.runs import RunContext, RunRegistry
from ..errors import CheckpointFileMissingError, SparkStateError
from ..storage import CheckpointStorage, open_storage
from .errors import MaxParallelismMismatchError, StateLocationError

FORMAT = 1
META_FILE = "_operator.json"
LAYOUT_DIR = "layouts"
STORE_DIR = "stores"
ROOT_CONF = "spark.sql.streaming.stateStore.sparkState.process.root"
DEFAULT_ROOT_DIR = C.LEGACY_PROCESS_ROOT_DIR
CHECKPOINT_DIR = C.PROCESS_CHECKPOINT_DIR
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: Set by spark-state's tick source on the query's thread: the query's checkpoint root, as
#: Spark resolved it (a URI: ``file:/...``, ``hdfs://...``, ``s3a://...``).
CHECKPOINT_ROOT_PROPERTY = "spark.sparkState.checkpointRoot"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Spark sets a streaming query's job group to its run id (``StreamExecution.runStream``);
#: the job description also names it (``...\nrunId = <uuid>\nbatch = N``).
JOB_GROUP_PROPERTY = "spark.jobGroup.id"
JOB_DESCRIPTION_PROPERTY = "spark.job.description"

_LOG = logging.getLogger(__name__)
_LAYOUT_RE = re.compile(r"^p(\d+)-b(\d+)\.json$")


@dataclass(frozen=True, order=True)
class Layout:
    """Parallelism ``n`` writing from batch version ``base`` on (see the module docstring)."""

    parallelism: int
    base: int

    @property
    def name(self) -> str:
        return f"p{self.parallelism}-b{self.base}"

    def store_path(self, partition: int) -> str:
        return f"{STORE_DIR}/{self.name}/{partition}"

    def store_version(self, batch_version: int) -> int:
        return batch_version - self.base


@dataclass(frozen=True)
class LocationSpec:
    """Picklable description of where the state lives; resolved inside tasks (see the module
    docstring)."""

    explicit: Optional[str]
    #: ``state_root`` (option or SQL conf); None: beside the checkpoint
    root: Optional[str]
    name: str
    storage_options: Mapping[str, str] = field(default_factory=dict)
    #: the former default root, ``./spark-state`` of the driver's working directory, absolute
    legacy_root: Optional[str] = None

    def resolve(self, query_id: Optional[str], checkpoint_root: Optional[str]) -> str:
        """The state location URL for a query (without the former default's fallback)."""
        if self.explicit:
            return self.explicit.rstrip("/") or self.explicit
        if self.root is not None:
            return f"{self.root.rstrip('/')}/{_query_id(query_id)}/{self.name}"
        if not checkpoint_root:
            raise StateLocationError(
                f"cannot place the state of {self.name!r} beside the query's checkpoint: the task has no local "
                f"property '{CHECKPOINT_ROOT_PROPERTY}', which spark-state's tick source sets when the query starts "
                "(is this a streaming query built by keyed_process/checkpointed_process?); pass state_location=... "
                "or state_root=... explicitly")
        return f"{checkpoint_root.rstrip('/')}/{CHECKPOINT_DIR}/{self.name}"

    def legacy(self, query_id: Optional[str]) -> Optional[str]:
        """Where the former default put this operator's state (None when the location is not
        the default one)."""
        if self.explicit or self.root is not None or not self.legacy_root or not query_id:
            return None
        return f"{self.legacy_root.rstrip('/')}/{query_id}/{self.name}"


def _query_id(query_id: Optional[str]) -> str:
    if not query_id:
        raise StateLocationError(
            "cannot place the state: the task has no local property "
            f"'{QUERY_ID_PROPERTY}' (is this running in a streaming query?); "
            "pass state_location=... explicitly")
    return query_id


def join(url: str, rel: str) -> str:
    return f"{url.rstrip('/')}/{rel}"


# ------------------------------------------------------------------------------ per process
_storages: dict[tuple[str, tuple], CheckpointStorage] = {}
_verified: set[tuple[str, str, Optional[int], Optional[tuple]]] = set()
_lock = threading.Lock()


def storage_for(url: str, options: Mapping[str, str]) -> CheckpointStorage:
    """The (process-wide, cached) checkpoint storage rooted at ``url``."""
    key = (url, tuple(sorted(options.items())))
    with _lock:
        storage = _storages.get(key)
        if storage is None:
            try:
                storage = open_storage(url, dict(options))
            except SparkStateError:
                raise
            except Exception as exc:
                raise StateLocationError(f"state location {url} cannot be opened: {exc}") from exc
            _storages[key] = storage
        return storage


_located: dict[tuple, str] = {}


def locate(spec: LocationSpec, query_id: Optional[str], checkpoint_root: Optional[str]) -> str:
    """The state location of ``spec`` for this query: the default one beside the checkpoint
    (cached per process), unless only the former default holds the operator's state (checked
    again by every task while that lasts)."""
    key = (spec.explicit, spec.root, spec.name, spec.legacy_root, tuple(sorted(spec.storage_options.items())),
           query_id, checkpoint_root)
    found = _located.get(key)
    if found is not None:
        return found
    url = spec.resolve(query_id, checkpoint_root)
    legacy = spec.legacy(query_id)
    if legacy is not None and _has_state(legacy, spec) and not _has_state(url, spec):
        # not cached: `spark-state move-state` may move it while this worker lives on, and the
        # restarted query must then find it beside the checkpoint
        _LOG.warning("spark-state: %s keeps its state at %s, the former default location; `spark-state move-state "
                     "<checkpoint>` moves it beside the checkpoint (%s)", spec.name, legacy, url)
        return legacy
    with _lock:
        _located[key] = url
    return url


def _has_state(url: str, spec: LocationSpec) -> bool:
    try:
        return storage_for(url, spec.storage_options).exists(META_FILE)
    except SparkStateError:
        return False


def read_meta(storage: CheckpointStorage) -> dict:
    """What the state location ``storage`` records in ``_operator.json`` (a JSON object: ``format``,
    ``kind``, ``max_parallelism`` and, for keyed functions, ``key``), for the tools that read it
    outside a query. The one reader of that file besides :func:`verify_location`.

    :raises StateLocationError: the file is missing, or not a JSON object (the message names it
        and asks whether ``storage`` is a state location at all).
    """
    try:
        meta = json.loads(storage.read_bytes(META_FILE))
        if not isinstance(meta, dict):
            raise ValueError(f"a JSON object expected, got {type(meta).__name__}")
    except (CheckpointFileMissingError, FileNotFoundError, ValueError) as exc:
        raise StateLocationError(
            f"{storage.full_url(META_FILE)} cannot be read ({exc}): is {storage.url} the state location of a "
            "keyed_process/checkpointed_process operator?") from None
    return meta


def verify_location(storage: CheckpointStorage, kind: str, max_parallelism: Optional[int],
                    key: Optional[Mapping[str, list]] = None) -> None:
    """Create ``_operator.json`` or check it against this operator's kind, max parallelism and
    key columns (``key``: ``{"columns": [...], "types": [Spark simple strings]}``, keyed only)."""
    cache_key = (storage.url, kind, max_parallelism, None if key is None else tuple(map(tuple, key.values())))
    if cache_key in _verified:
        return
    wanted: dict = {"format": FORMAT, "kind": kind, "max_parallelism": max_parallelism}
    if key is not None:
        wanted["key"] = {"columns": list(key["columns"]), "types": list(key["types"])}
    try:
        try:
            storage.write_bytes(META_FILE, json.dumps(wanted).encode(), overwrite=False)
            found = wanted
        except FileExistsError:
            found = json.loads(storage.read_bytes(META_FILE))
        _check_meta(storage, found, kind, max_parallelism, wanted.get("key"))
        if key is not None and "key" not in found:  # written before the key was recorded
            storage.write_bytes(META_FILE, json.dumps({**found, "key": wanted["key"]}).encode(), overwrite=True)
    except SparkStateError as exc:
        if isinstance(exc, StateLocationError):
            raise
        raise StateLocationError(f"state location {storage.url} is not usable: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise StateLocationError(f"state location {storage.url} is not usable: {exc}") from exc
    with _lock:
        _verified.add(cache_key)


def _check_meta(storage: CheckpointStorage, found: dict, kind: str, max_parallelism: Optional[int],
                key: Optional[dict]) -> None:
    if found.get("format") != FORMAT or found.get("kind") != kind:
        raise StateLocationError(
            f"state location {storage.url} holds state of a {found.get('kind')!r} operator "
            f"(format {found.get('format')}), not of a {kind!r} operator; give this operator its "
            "own location (option name=... or state_location=...)")
    if found.get("max_parallelism") != max_parallelism:
        raise MaxParallelismMismatchError(
            f"state at {storage.url} was created with max_parallelism={found.get('max_parallelism')} "
            f"but this run uses max_parallelism={max_parallelism}; the number of key groups is "
            f"fixed for the life of the state: pass max_parallelism={found.get('max_parallelism')}")
    recorded = found.get("key")
    if key is not None and recorded is not None and list(recorded.get("types", [])) != key["types"]:
        raise StateLocationError(
            f"state at {storage.url} is keyed by {_describe_key(recorded)} but this run keys by "
            f"{_describe_key(key)}: keys of other types hash to other key groups and encode to other bytes, "
            "so the state would not be found. Key by columns of the recorded types (cast them), or give "
            "this function a new state location (name=... or state_location=...)")


def _describe_key(key: Mapping[str, list]) -> str:
    return ", ".join(f"{c} {t}" for c, t in zip(key.get("columns", []), key.get("types", [])))


def list_layouts(storage: CheckpointStorage) -> list[Layout]:
    """Every layout registered under the location."""
    layouts = []
    for name in storage.list_dir(LAYOUT_DIR):
        m = _LAYOUT_RE.match(name)
        if m:
            layouts.append(Layout(int(m.group(1)), int(m.group(2))))
    return sorted(layouts)


def register_layout(storage: CheckpointStorage, layout: Layout) -> None:
    """Record that ``layout`` exists (idempotent: create-if-absent)."""
    body = json.dumps({"parallelism": layout.parallelism, "base": layout.base}).encode()
    try:
        storage.write_bytes(f"{LAYOUT_DIR}/{layout.name}.json", body, overwrite=False)
    except FileExistsError:
        pass


def run_id_of_task(properties: Mapping[str, Optional[str]]) -> Optional[str]:
    """The streaming query run a task belongs to, from its local properties (None outside a
    streaming query)."""
    description = properties.get(JOB_DESCRIPTION_PROPERTY) or ""
    m = _RUN_ID_RE.search(description)
    if m:
        return m.group(1)
    return properties.get(JOB_GROUP_PROPERTY) or None


_RUN_ID_RE = re.compile(r"^runId = ([0-9a-fA-F-]{36})$", re.MULTILINE)
_contexts: dict[tuple[str, str], RunContext] = {}


def run_context(storage: CheckpointStorage, run_id: str) -> RunContext:
    """The process-wide run context of ``run_id`` at this state location (registry ``runs/``)."""
    key = (storage.url, run_id)
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = _contexts[key] = RunContext(RunRegistry(storage), run_id)
        return ctx


def valid_rank(storage: CheckpointStorage, layout: Layout, partition: int, batch_version: int,
               runs: RunContext) -> Optional[int]:
    """The rank of the valid copy of ``batch_version`` in one store, or None (no valid copy).
    ``runs`` must have been refreshed (``before_load``) by the caller."""
    s = layout.store_version(batch_version)
    if s <= 0:
        return None
    ranks = list_copies(storage.child(layout.store_path(partition))).get(s, [])
    return runs.choose(batch_version, ranks)


@dataclass(frozen=True)
class Choice:
    """Where batch version ``V`` comes from: ``direct`` (load ``layout``'s own store) or
    ``rescale`` (build layout ``(n, V)`` from ``layout``'s stores ``sources``); ``rank`` is
    the run rank of the copies used."""

    mode: str
    layout: Layout
    sources: tuple[int, ...] = ()
    rank: int = 0


def choose_layout(
    storage: CheckpointStorage,
    parallelism: int,
    partition: int,
    batch_version: int,
    sources_needed,
    runs: RunContext,
) -> Optional[Choice]:
    """See the module docstring. ``sources_needed(old_layout)`` lists the old partitions whose
    state partition ``partition`` of ``parallelism`` takes over; ``runs`` (refreshed by the
    caller, global versions = batch versions) says which copies are valid. None when no layout
    holds a valid copy."""
    best: Optional[tuple[tuple[int, int, bool], Choice]] = None
    for lay in list_layouts(storage):
        if lay.base >= batch_version:
            continue
        if lay.parallelism == parallelism:
            rank = valid_rank(storage, lay, partition, batch_version, runs)
            if rank is None:
                continue
            choice = Choice("direct", lay, (), rank)
        else:
            needed = tuple(sources_needed(lay))
            ranks = [valid_rank(storage, lay, j, batch_version, runs) for j in needed]
            if not ranks or any(r is None for r in ranks):
                continue
            # The valid copies of one version all come from the run that committed the batch.
            rank = min(r for r in ranks if r is not None)
            choice = Choice("rescale", lay, needed, rank)
        order = (choice.rank, lay.base, lay.parallelism == parallelism)
        if best is None or order > best[0]:
            best = (order, choice)
    return best[1] if best else None


def describe_layouts(storage: CheckpointStorage) -> str:
    """Human-readable summary for error messages: each layout and its partition 0's versions."""
    parts = []
    for lay in list_layouts(storage):
        versions = sorted(v + lay.base for v in list_copies(storage.child(lay.store_path(0))))
        span = f"{versions[0]}..{versions[-1]}" if versions else "none"
        parts.append(f"{lay.name} (batch versions {span})")
    return ", ".join(parts) or "no layouts"
