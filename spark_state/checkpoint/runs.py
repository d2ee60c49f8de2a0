"""Query runs: which copy of a version is valid, first committer wins, and one writer at a time.

A *run* is one start of a streaming query (Spark's ``runId``: a restart is a new run of the
same query). Several copies of one version can exist in checkpoint storage:

* attempts of one task in one run -- a retry after a failure, a speculative copy running
  beside the original;
* attempts in different runs -- a batch that failed part-way (some partitions committed,
  the batch never reached Spark's commit log) and was re-run after a restart, possibly at
  another parallelism; or a task of a stopped run that was still finishing (a zombie);
* a second copy of the query started on the same checkpoint by mistake.

Rules
-----
1. **Ranks.** Every run that commits registers once in a *registry* (one per store for the
   Spark provider, one per state location for the Python API) and gets a rank: 1, 2, 3, ...
   in order of registration. Its manifests are ``manifests/<v>.r<rank>.json``; commits
   without a run (the engine API, earlier releases) are *unranked* (rank 0,
   ``manifests/<v>.json``), and a re-commit of one replaces it.
2. **First committer wins within a run.** A ranked manifest is created with
   create-if-absent: of two attempts of one task (retry or speculation) the first to commit
   makes the version; the other's commit is a no-op (see ``VersionedStore.commit``), so no
   version is ever written twice with different content.
3. **A later run supersedes an earlier one from its start on.** A run records its *start
   version* ``b``: the version its first commit was built on, i.e. the first batch it ran.
   Spark starts a run at the first batch missing from its commit log, so every batch ``>= b``
   run by an earlier run was never committed: an earlier run's copy of version ``v``
   (made by batch ``v - 1``) is **invalid if** ``v > b`` for any later run. The valid copy of
   ``v`` is then unique: the one made by the last run that ran batch ``v - 1``, the run that
   got it into the commit log. A reader never looks at runs later than its own (a run that
   registered after it), so a second writer cannot change what the first one reads.
4. **Fencing.** A registered run that *loads* a version ``v`` greater than the start version
   ``b'`` of a later run proves that both are alive: it ran batch ``v - 1 >= b'``, which was
   not yet committed when the later run started. A zombie task of a stopped run cannot do
   that (it finishes a batch the later run also re-runs, so it loads at most ``b'``). The
   older run then writes ``runs/<later>.fenced`` and goes on; the later run fails at its next
   load or commit with :class:`~spark_state.errors.ConcurrentWriterError`.
5. **A run that starts behind fails at once.** A run loading version ``v`` that finds a valid
   copy of a version ``>= v + 2`` made by an earlier run knows that run was still committing
   after this one started (it ran batch ``v + 1``, which needs batch ``v`` in the commit log,
   which this run found missing at its start). It fails before it writes anything: a run
   that has committed before fails at the load, one that has not at its first commit, because
   until it commits it may be a reader (Spark's state data source comes with a run id of its
   own, to read any old version). A run that died leaves at most version ``v + 1`` behind (its
   batch ``v`` in flight), so a restart after a crash never trips this rule.
Nothing here depends on clocks.

Byte layouts (JSON, UTF-8)::

    runs/<seq>.json    {"kind": "spark-state/run", "format_version": 1, "seq": 2,
                        "run_id": "4f7c...", "start_version": 17, "registered_ms": 1732...,
                        "host": "worker-3", "pid": 4242}
    runs/<seq>.fenced  {"kind": "spark-state/fence", "format_version": 1, "seq": 2,
                        "by_seq": 1, "by_run_id": "09ab...", "at_version": 19,
                        "at_ms": 1732..., "host": "worker-1", "pid": 77}

Versions in records and rules are the caller's *global* versions: a store version plus
the ``version_offset`` of :class:`RunContext` (the Python API numbers its stores per layout).

Size: the docstring is the rules' one statement with their proofs, which the code checks rule by
rule and docs/checkpoints-and-storage.md refers to.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Optional

from .. import constants as C
from ..errors import CheckpointCorruptError, CheckpointFileMissingError, ConcurrentWriterError, StoreStateError
from ..storage import CheckpointStorage
from . import layout
from .metadata import load_document

_LOG = logging.getLogger(__name__)

#: How many registration slots to try before giving up (only a storm of concurrent new
#: runs could exhaust it).
_MAX_REGISTER_TRIES = 32


@dataclass(frozen=True)
class RunRecord:
    """A registered run (``runs/<seq>.json``)."""

    seq: int
    run_id: str
    start_version: int
    registered_ms: int = 0
    host: str = ""
    pid: int = 0

    def describe(self) -> str:
        when = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.registered_ms / 1000))
                if self.registered_ms else "?")
        return (f"run {self.run_id} (rank {self.seq}, started at version {self.start_version}, "
                f"registered {when} by {self.host or '?'} pid {self.pid})")


@dataclass(frozen=True)
class Fence:
    """Why a run was fenced off (``runs/<seq>.fenced``)."""

    seq: int
    by_seq: int
    by_run_id: str
    at_version: int
    at_ms: int = 0
    host: str = ""
    pid: int = 0


@dataclass(frozen=True)
class RunHistory:
    """The registry as listed once: every run, and which ones are fenced."""

    runs: tuple[RunRecord, ...] = ()
    fenced: frozenset[int] = frozenset()

    def by_run_id(self, run_id: str) -> Optional[RunRecord]:
        for record in self.runs:
            if record.run_id == run_id:
                return record
        return None

    @property
    def max_seq(self) -> int:
        return max((r.seq for r in self.runs), default=C.UNRANKED)


# ------------------------------------------------------------------------ pure rules
def is_valid_copy(version: int, rank: int, history: RunHistory, reader_seq: Optional[int]) -> bool:
    """Rule 3: the copy of global ``version`` made by the run of ``rank`` is valid for a
    reader of rank ``reader_seq`` (None: a reader after every registered run)."""
    if reader_seq is not None and rank > reader_seq:
        return False  # a run that registered after the reader: never its business
    for later in history.runs:
        if later.seq <= rank or (reader_seq is not None and later.seq > reader_seq):
            continue
        if version > later.start_version:
            return False
    return True


def choose_copy(version: int, ranks: Iterable[int], history: RunHistory, reader_seq: Optional[int]) -> Optional[int]:
    """The rank whose copy of global ``version`` a reader loads, or None if no copy is valid.

    Normally at most one copy is valid (rule 3); if several are (unranked copies beside
    ranked ones that do not rule them out), the highest rank wins, as the latest writer.
    """
    valid = [r for r in ranks if is_valid_copy(version, r, history, reader_seq)]
    return max(valid) if valid else None


def copies_ahead(version: int, copies: dict[int, list[int]], history: RunHistory,
                 reader_seq: Optional[int]) -> list[tuple[int, int]]:
    """Rule 5: valid ``(version, rank)`` copies of versions ``>= version + 2`` by runs before
    the reader -- evidence that another run was alive after the reader started at ``version``."""
    return [(w, r) for w, ranks in sorted(copies.items()) if w >= version + 2 for r in ranks
            if (reader_seq is None or r < reader_seq) and is_valid_copy(w, r, history, reader_seq)]


def runs_to_fence(own: RunRecord, loaded_version: int, history: RunHistory) -> list[RunRecord]:
    """Rule 4: later runs that ``own`` proves concurrent by loading global ``loaded_version``."""
    return [r for r in history.runs
            if r.seq > own.seq and r.seq not in history.fenced and loaded_version > r.start_version]


# ------------------------------------------------------------------------ the registry
class RunRegistry:
    """The ``runs/`` directory of one store or state location."""

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        #: Records read so far. A record never changes once created (create-if-absent), so
        #: each is read once: the registry gains a file per query restart, and reading them
        #: all at every load would make each batch slower with every restart.
        self._records: dict[int, RunRecord] = {}

    def history(self) -> RunHistory:
        """List every run record and fence (one listing plus one read per record not seen yet)."""
        runs: list[RunRecord] = []
        fenced: set[int] = set()
        for name in self.storage.list_dir(C.RUNS_DIR):
            parsed = layout.parse_run_name(name)
            if parsed is None:
                continue
            seq, kind = parsed
            if kind == "fenced":
                fenced.add(seq)
            else:
                record = self._records.get(seq)
                if record is None:
                    record = self._records[seq] = self._read_record(seq)
                runs.append(record)
        return RunHistory(tuple(sorted(runs, key=lambda r: r.seq)), frozenset(fenced))

    def register(self, run_id: str, start_version: int) -> RunRecord:
        """The record of ``run_id``, registering it with the next rank if it has none.

        Idempotent and safe under races: ranks are claimed with create-if-absent, and a
        claim found taken is read back (it may be this run's own, from another task or from
        a retried request whose first answer was lost).
        """
        history = self.history()
        existing = history.by_run_id(run_id)
        if existing is not None:
            return existing
        seq = history.max_seq + 1
        for _ in range(_MAX_REGISTER_TRIES):
            record = RunRecord(seq=seq, run_id=run_id, start_version=start_version,
                               registered_ms=int(time.time() * 1000), host=socket.gethostname(), pid=os.getpid())
            body = _document(C.RUN_KIND, asdict(record))
            try:
                self.storage.write_bytes(layout.run_record_path(seq), body, overwrite=False)
                _LOG.info("registered %s in %s", record.describe(), self.storage.url)
                return record
            except FileExistsError:
                taken = self._read_record(seq)
                if taken.run_id == run_id:
                    return taken
                seq += 1
        raise ConcurrentWriterError(
            f"could not register run {run_id} in {self.storage.full_url(C.RUNS_DIR)}: "
            f"{_MAX_REGISTER_TRIES} ranks in a row were taken by other runs at the same moment")

    def fence(self, target: RunRecord, by: RunRecord, at_version: int) -> None:
        fence = Fence(seq=target.seq, by_seq=by.seq, by_run_id=by.run_id, at_version=at_version,
                      at_ms=int(time.time() * 1000), host=socket.gethostname(), pid=os.getpid())
        try:
            self.storage.write_bytes(layout.fence_path(target.seq), _document(C.FENCE_KIND, asdict(fence)),
                                     overwrite=False)
        except FileExistsError:
            return
        _LOG.warning(
            "%s is writing %s while the earlier %s is still running (it loaded version %d after "
            "the later run started at version %d): the later run is fenced off and will fail",
            target.describe(), self.storage.url, by.describe(), at_version, target.start_version)

    def read_fence(self, seq: int) -> Optional[Fence]:
        path = layout.fence_path(seq)
        try:
            data = self.storage.read_bytes(path)
        except CheckpointFileMissingError:
            return None
        doc = load_document(data, self.storage.full_url(path), C.FENCE_KIND)
        try:
            return Fence(seq=int(doc["seq"]), by_seq=int(doc["by_seq"]), by_run_id=str(doc["by_run_id"]),
                         at_version=int(doc["at_version"]), at_ms=int(doc.get("at_ms", 0)),
                         host=str(doc.get("host", "")), pid=int(doc.get("pid", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorruptError(self.storage.full_url(path), f"malformed fence ({exc!r})") from None

    def is_fenced(self, seq: int) -> bool:
        return self.storage.exists(layout.fence_path(seq))

    def _read_record(self, seq: int) -> RunRecord:
        path = layout.run_record_path(seq)
        doc = load_document(self.storage.read_bytes(path), self.storage.full_url(path), C.RUN_KIND)
        try:
            return RunRecord(seq=int(doc["seq"]), run_id=str(doc["run_id"]), start_version=int(doc["start_version"]),
                             registered_ms=int(doc.get("registered_ms", 0)), host=str(doc.get("host", "")),
                             pid=int(doc.get("pid", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorruptError(self.storage.full_url(path), f"malformed run record ({exc!r})") from None


# ------------------------------------------------------------------------ per store view
class RunContext:
    """What a :class:`~spark_state.engine.store.VersionedStore` needs to know about runs.

    One object per (registry, run) -- shared by every store of that run in the process
    when the registry is a state location's. ``run_id=None`` is a *reader* (the state data
    source, inspection): it never registers, fences or writes, and reads as if it came
    after every registered run. ``version_offset`` turns a store's versions into the
    registry's global versions (store version ``s`` of a layout based at ``b`` is global
    version ``b + s``).

    Call order per task: :meth:`before_load` (refreshes the history, checks and applies
    fences), :meth:`choose` (which copy to load), :meth:`commit_rank` and
    :meth:`before_commit` when committing.
    """

    def __init__(self, registry: RunRegistry, run_id: Optional[str], version_offset: int = 0) -> None:
        self.registry = registry
        self.run_id = run_id
        self.version_offset = version_offset
        self._lock = threading.Lock()
        self._history = RunHistory()
        self._own: Optional[RunRecord] = None

    def at_offset(self, version_offset: int) -> "RunContext":
        """The same run seen by stores whose versions start at ``version_offset``."""
        other = RunContext(self.registry, self.run_id, version_offset)
        other._history, other._own = self._history, self._own
        return other

    @property
    def own(self) -> Optional[RunRecord]:
        """This run's record once it has committed (registered)."""
        return self._own

    @property
    def history(self) -> RunHistory:
        return self._history

    @property
    def reader_seq(self) -> Optional[int]:
        return self._own.seq if self._own is not None else None

    def refresh(self) -> RunHistory:
        history = self.registry.history()
        with self._lock:
            self._history = history
            if self._own is None and self.run_id is not None:
                self._own = history.by_run_id(self.run_id)
        return history

    def before_load(self, version: int) -> None:
        """Refresh the history; fail if this run was fenced off; fence later runs that this
        load proves concurrent (rule 4)."""
        history = self.refresh()
        own = self._own
        if own is None:
            return
        if own.seq in history.fenced:
            self._raise_fenced(own)
        for later in runs_to_fence(own, version + self.version_offset, history):
            self.registry.fence(later, own, version + self.version_offset)

    def choose(self, version: int, ranks: Iterable[int]) -> Optional[int]:
        return choose_copy(version + self.version_offset, ranks, self._history, self.reader_seq)

    def check_not_behind(self, version: int, copies: dict[int, list[int]], where: str) -> None:
        """Rule 5 for a writer loading store ``version`` with ``copies`` (store versions ->
        ranks) in storage: fail if an earlier run has committed two or more versions past it."""
        if self.run_id is None:
            return
        offset = self.version_offset
        ahead = copies_ahead(version + offset, {v + offset: r for v, r in copies.items()},
                             self._history, self.reader_seq)
        if not ahead:
            return
        newest, rank = ahead[-1]
        other = next((r for r in self._history.runs if r.seq == rank), None)
        who = other.describe() if other else "a run of an earlier release (unranked commits)"
        raise ConcurrentWriterError(
            f"two queries are writing the state at {where}: run {self.run_id} starts at version "
            f"{version + offset}, but {who} has since committed version {newest}. Either that query "
            "is still running (a second copy of the job was started on the same checkpoint or state "
            "location), or this location holds the state of another query whose checkpoint was "
            "deleted or replaced. This run stops before writing anything, so the other state stays "
            "unharmed. Stop the other query, or give this one its own checkpoint and state location "
            "(or delete the old state if it is no longer needed).")

    def commit_rank(self, loaded_version: int) -> int:
        """The rank to commit with: registers the run at its first commit (start version =
        the loaded version). Readers may not commit."""
        if self.run_id is None:
            raise StoreStateError(
                f"{self.registry.storage.url} was opened to be read (no query run id: the Spark provider "
                "passes the run's sql.streaming.runId); it cannot commit")
        with self._lock:
            own = self._own
        if own is None:
            own = self.registry.register(self.run_id, loaded_version + self.version_offset)
            with self._lock:
                self._own = own
        return own.seq

    def before_commit(self) -> None:
        """Fail if this run has been fenced off since its last load (one existence check)."""
        own = self._own
        if own is not None and self.registry.is_fenced(own.seq):
            self._raise_fenced(own)

    def _raise_fenced(self, own: RunRecord) -> None:
        fence = self.registry.read_fence(own.seq)
        other = None
        if fence is not None:
            other = next((r for r in self.refresh().runs if r.seq == fence.by_seq), None)
        by = other.describe() if other else (f"run {fence.by_run_id}" if fence else "an earlier run")
        at = f" loaded version {fence.at_version}" if fence else " is still writing"
        raise ConcurrentWriterError(
            f"two queries are writing the state at {self.registry.storage.url}: this {own.describe()} "
            f"started while the earlier {by} was still running (it{at} after this run started). "
            "This run has been fenced off so that the first one goes on unharmed; nothing it wrote "
            "will ever be read by the first. Stop one of the two queries (or give the second its own "
            "checkpoint location); a restart after the first has stopped proceeds normally.")


def _document(kind: str, fields: dict) -> bytes:
    return json.dumps({"kind": kind, "format_version": C.FORMAT_VERSION, **fields}, indent=1).encode()
