"""In-place rescale: change the partition count of a stopped query's checkpoint.

Like Spark's offline repartition, but for every operator spark-state's provider runs and for
process state. It is a rewrite (:mod:`.rewrite`: the liveness checks, a batch ``N+1`` that reads
no new input, state version ``N+2``, the commit last, and a rerun after an interruption) whose
provider stores are re-split into the new count (:mod:`.resplit`: each row goes where Spark's
``HashPartitioning`` sends its key).

**Process state** (``keyed_process`` / ``checkpointed_process``) is *not* re-split here. Its
runtime already rescales by key group (and redistributes operator state) at the first
batch run at another ``parallelism`` -- the same code path for a restart, a restore and an
in-place rescale, so online and offline rescale of process state are one implementation
(``spark_state/process/stores.py`` + ``state/rescale.py``). Its parallelism is an argument of
``keyed_process``, not Spark's pinned partition count, so the rescale keeps its layout (a copy
of batch ``N``'s) and the next run moves the state if the parallelism differs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from .rewrite import prepare_rewrite, rewrite_as_new_batch


@dataclass
class RescaleResult:
    checkpoint: str
    batch_id: int
    old_partitions: int
    new_partitions: int
    operators: list[dict[str, Any]]
    process_states: list[str]
    keys: int
    #: entries moved (data and system keys)
    rows: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rescale(checkpoint: str, partitions: int, *, process_root: Optional[str] = None,
            process_locations: Optional[dict[str, str]] = None, storage_options: Optional[dict[str, str]] = None,
            force: bool = False, progress: bool = True) -> RescaleResult:
    """Change the partition count of a stopped query's checkpoint in place (module docstring)."""
    if not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"--partitions must be a positive integer, got {partitions!r}")
    started = time.perf_counter()
    rewrite = prepare_rewrite(checkpoint, storage_options, force, "rescale", process_root=process_root,
                              process_locations=process_locations)
    ckpt, last, old = rewrite.ckpt, rewrite.last, rewrite.partitions
    if old == partitions:
        raise ValueError(
            f"{ckpt.url} already has {partitions} partitions (spark.sql.shuffle.partitions of batch {last})")
    op_summaries, total_rows = rewrite_as_new_batch(rewrite, partitions, progress)
    return RescaleResult(ckpt.url, last + 1, old, partitions, op_summaries, [p.name for p in rewrite.processes],
                         sum(o["keys"] for o in op_summaries), total_rows, round(time.perf_counter() - started, 3))
