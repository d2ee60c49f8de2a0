"""Where a process operator keeps its state, and which layout holds a version.

Resolving the location
----------------------
``state_location`` given: used as is (a local path, ``file://``, ``s3://`` or ``hdfs://`` URL).
Otherwise ``<root>/<query id>/<name>``: ``root`` is the option ``state_root``, else the SQL conf
``spark.sql.streaming.stateStore.sparkState.process.root``, else ``./spark-state`` in the
driver's working directory (made absolute on the driver, like ``spark-warehouse``); the query
id is the task local property ``sql.streaming.queryId``, which Spark keeps in the query's
checkpoint, so a restart from the same checkpoint finds the same directory; ``name`` is the
option ``name``, default the function's class name.

Layout of one state location (one operator)
-------------------------------------------
::

    _operator.json               {"format": 1, "kind": "keyed"|"operator", "max_parallelism": 128|null}
    layouts/p<n>-b<base>.json    one file per layout ever used (create-if-absent, never changed)
    stores/p<n>-b<base>/<i>/     partition i's VersionedStore (manifests/, changelogs/, ...)

A *layout* is the set of ``n`` partition stores a parallelism ``n`` writes, starting at batch
version ``base``. Store version ``s`` of a layout holds batch version ``base + s``: the state
after batch ``base + s - 1``. Batch ``B`` loads batch version ``B`` and commits ``B + 1``.

* The first batch (``B = 0``) uses layout ``(n, 0)``.
* A rescale at batch ``B`` (no layout of parallelism ``n`` holds version ``B``, another does)
  creates layout ``(n, B)``: its store version 0 is empty; the task copies the state of
  batch version ``B`` from the old layout into the pending epoch and commits store version 1,
  i.e. batch version ``B + 1``. A layout therefore *holds* batch versions ``base + 1`` on.

Choosing the layout for batch version ``V > 0`` (:func:`choose_layout`): among layouts with
``base < V``, newest ``base`` first, at equal ``base`` the current parallelism first, take the
first that holds ``V``: for the current parallelism, this partition's store has version
``V - base`` (load it); for another parallelism, every old store the partition needs has it
(rescale from them). Why newest base first: an older layout can hold a version past a newer
layout's base only from a batch attempt that failed and was then re-run (and completed) at
the new parallelism, so its copy is the discarded one. (If the discarded attempt's layout is
the newer one -- a batch fails at parallelism ``m`` after some partitions committed, and is
re-run at the old parallelism -- the rule picks the discarded copy; for a deterministic
function both copies are equal.)

Max parallelism is recorded in ``_operator.json`` by the first task and checked by every
task; a run with another value fails with :class:`MaxParallelismMismatchError`.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..errors import SparkStateError
from ..storage import CheckpointStorage, open_storage
from .errors import MaxParallelismMismatchError, StateLocationError

FORMAT = 1
META_FILE = "_operator.json"
LAYOUT_DIR = "layouts"
STORE_DIR = "stores"
ROOT_CONF = "spark.sql.streaming.stateStore.sparkState.process.root"
DEFAULT_ROOT_DIR = "spark-state"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

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
    """Picklable description of where the state lives; resolved inside tasks."""

    explicit: Optional[str]
    root: str
    name: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def resolve(self, query_id: Optional[str]) -> str:
        """The state location URL for a query (``query_id`` unused when explicit)."""
        if self.explicit:
            return self.explicit.rstrip("/") or self.explicit
        if not query_id:
            raise StateLocationError(
                "cannot place the state: the task has no local property "
                f"'{QUERY_ID_PROPERTY}' (is this running in a streaming query?); "
                "pass state_location=... explicitly")
        return f"{self.root.rstrip('/')}/{query_id}/{self.name}"


def join(url: str, rel: str) -> str:
    return f"{url.rstrip('/')}/{rel}"


# ------------------------------------------------------------------------------ per process
_storages: dict[tuple[str, tuple], CheckpointStorage] = {}
_verified: set[tuple[str, str, Optional[int]]] = set()
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


def verify_location(storage: CheckpointStorage, kind: str, max_parallelism: Optional[int]) -> None:
    """Create ``_operator.json`` or check it against this operator's kind and max parallelism."""
    key = (storage.url, kind, max_parallelism)
    if key in _verified:
        return
    wanted = {"format": FORMAT, "kind": kind, "max_parallelism": max_parallelism}
    try:
        try:
            storage.write_bytes(META_FILE, json.dumps(wanted).encode(), overwrite=False)
            found = wanted
        except FileExistsError:
            found = json.loads(storage.read_bytes(META_FILE))
    except SparkStateError as exc:
        if isinstance(exc, StateLocationError):
            raise
        raise StateLocationError(f"state location {storage.url} is not usable: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise StateLocationError(f"state location {storage.url} is not usable: {exc}") from exc
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
    with _lock:
        _verified.add(key)


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


def store_has_version(storage: CheckpointStorage, layout: Layout, partition: int, batch_version: int) -> bool:
    s = layout.store_version(batch_version)
    return s > 0 and storage.exists(f"{layout.store_path(partition)}/manifests/{s}.json")


@dataclass(frozen=True)
class Choice:
    """Where batch version ``V`` comes from: ``direct`` (load ``layout``'s own store) or
    ``rescale`` (build layout ``(n, V)`` from ``layout``'s stores ``sources``)."""

    mode: str
    layout: Layout
    sources: tuple[int, ...] = ()


def choose_layout(
    storage: CheckpointStorage,
    parallelism: int,
    partition: int,
    batch_version: int,
    sources_needed,
) -> Optional[Choice]:
    """See the module docstring. ``sources_needed(old_layout)`` lists the old partitions whose
    state partition ``partition`` of ``parallelism`` takes over. None when nothing holds it."""
    candidates = [lay for lay in list_layouts(storage) if lay.base < batch_version]
    candidates.sort(key=lambda lay: (-lay.base, lay.parallelism != parallelism))
    for lay in candidates:
        if lay.parallelism == parallelism:
            if store_has_version(storage, lay, partition, batch_version):
                return Choice("direct", lay)
        else:
            needed = tuple(sources_needed(lay))
            if all(store_has_version(storage, lay, j, batch_version) for j in needed):
                return Choice("rescale", lay, needed)
    return None


def describe_layouts(storage: CheckpointStorage) -> str:
    """Human-readable summary for error messages: each layout and its partition 0's versions."""
    parts = []
    for lay in list_layouts(storage):
        names = storage.list_dir(f"{lay.store_path(0)}/manifests")
        versions = sorted(int(n.split(".")[0]) + lay.base for n in names if n.split(".")[0].isdigit())
        span = f"{versions[0]}..{versions[-1]}" if versions else "none"
        parts.append(f"{lay.name} (batch versions {span})")
    return ", ".join(parts) or "no layouts"
