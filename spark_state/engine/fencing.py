"""The store's one door to the run registry: every rule of :mod:`spark_state.checkpoint.runs`
a store applies, asked at one point of a load (:func:`.restore_plan.plan_restore`) and one
point of a commit (:func:`.commit.commit_epoch`) or import.

Rules as a store applies them (numbers as in ``checkpoint/runs.py``):

* **Load** (:meth:`RunGate.admit_load`): rule 4 -- refresh the run history, fail if this run
  was fenced off, fence later runs this load proves concurrent -- once per version (the
  provider loads a version again right before it commits it). Then, unless the local copy
  already holds the version, one listing of the manifests in storage answers rule 5 (a run
  that starts behind an earlier one) and rule 3 (which run's copy of the version is valid).
* **Rule 5 waits for a first commit.** A run that has not committed here yet may be a reader
  (Spark's state data source passes a run id of its own, to read old versions), so its
  rule-5 failure is kept and raised by its first commit (:meth:`RunGate.commit_rank`),
  still before it writes anything; a run that has committed before fails at the load.
* **Commit** (:meth:`RunGate.commit_rank`): the run registers at its first commit (rank =
  registration order, start version = the loaded version) and checks once more that it was
  not fenced since its load (one existence check).
* **Import** (:meth:`RunGate.import_rank`): a tool run registers as if it had run the batch
  that made the imported version.
* **No run** (the plain engine API): no registry, no I/O here; commits are unranked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import constants as C
from ..checkpoint.retention import list_copies
from ..checkpoint.runs import RunContext
from ..errors import ConcurrentWriterError
from ..storage import CheckpointStorage


@dataclass(frozen=True)
class Admission:
    """What the run registry said about a load.

    ``copies`` (store version -> ranks of its manifests) is the listing the rules were checked
    on, None when no listing was made (no run, or the local copy already holds the version);
    ``rank`` is the copy of the version to load, None when no copy is valid for this run.
    """

    copies: Optional[dict[int, list[int]]] = None
    rank: Optional[int] = None


class RunGate:
    """Run fencing for one store: ``runs`` None is the plain engine API (unranked, unfenced)."""

    def __init__(self, runs: Optional[RunContext], storage: CheckpointStorage) -> None:
        self.runs = runs
        self._storage = storage
        # Rule 5 found, at the last load, that an earlier run committed past this one; raised
        # at the first commit, since a run that has not committed yet may be a reader.
        self._behind: Optional[ConcurrentWriterError] = None
        self._checked_at: Optional[int] = None

    @property
    def run_id(self) -> Optional[str]:
        return self.runs.run_id if self.runs is not None else None

    def admit_load(self, version: int, cached: bool) -> Admission:
        """Rules 4, 5 and 3 for a load of ``version``; ``cached``: the local copy holds it."""
        runs = self.runs
        if runs is None:
            return Admission()
        if not (cached and self._checked_at == version):
            runs.before_load(version)
            self._checked_at = version
        if cached:
            return Admission()
        copies = list_copies(self._storage)
        self._check_not_behind(version, copies)
        if version == 0:  # a new query on a location another one writes?
            return Admission(copies)
        return Admission(copies, runs.choose(version, copies.get(version, [])))

    def commit_rank(self, loaded_version: int) -> int:
        """The rank a commit on ``loaded_version`` writes its manifest with (registering the
        run at its first commit); raises a rule-5 failure kept from the load, or a fence."""
        runs = self.runs
        if runs is None:
            return C.UNRANKED
        if self._behind is not None:
            raise self._behind
        rank = runs.commit_rank(loaded_version)
        runs.before_commit()
        return rank

    def import_rank(self, version: int) -> int:
        """The rank an imported ``version`` is written with: the tool run registers as having
        started at ``version - 1`` (copies of later versions by earlier runs are then invalid)."""
        runs = self.runs
        if runs is None:
            return C.UNRANKED
        runs.before_load(version - 1)
        rank = runs.commit_rank(version - 1)
        runs.before_commit()
        return rank

    def _check_not_behind(self, version: int, copies: dict[int, list[int]]) -> None:
        """Rule 5: a run that has committed here before fails at once; one that has not keeps
        the failure for its first commit."""
        assert self.runs is not None
        self._behind = None
        try:
            self.runs.check_not_behind(version, copies, self._storage.url)
        except ConcurrentWriterError as behind:
            if self.runs.own is not None:
                raise
            self._behind = behind
