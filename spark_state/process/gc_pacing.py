"""Fewer cyclic garbage collections while a task turns Arrow batches into rows and back.

Why: a task of a process function allocates several container objects per row (the row
tuple, the output tuple, the lists that group rows by key and gather output columns). With
CPython's default thresholds (700, 10, 10) that starts a young collection every 700 net
allocations, and the survivors -- the rows of the batch being processed, which all stay alive
until their key is done -- soon trigger full collections, each of which walks every object of
the worker process (pyspark, pyarrow, pandas and their modules: several hundred thousand).
Measured on the keyed running count (``bench/keyed_bench.py``), the collector took more time
than the function, the state access and the Arrow conversion together.

What: for the duration of one task the first threshold is raised to :data:`TASK_GEN0_THRESHOLD`
(and the older generations are collected less often), then the previous thresholds come back.
Nothing is disabled: reference counting frees acyclic garbage at once as always, and cyclic
garbage a function creates is still collected, after at most that many allocations. If the
application turned the collector off (``gc.disable()``) or tuned it beyond these values, its
setting stands.

Invariant: thresholds are process-wide; a Python worker runs one task at a time, and the
previous thresholds are restored when the task's generator finishes, fails or is closed.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator, TypeVar

T = TypeVar("T")

#: Young-generation threshold during a task: one collection per ~50k container allocations
#: (~a few MB of young objects), i.e. a handful per micro-batch instead of thousands.
TASK_GEN0_THRESHOLD = 50_000
#: Collections of the next generation per collection of the younger one during a task.
TASK_OLDER_THRESHOLDS = (20, 100)


@contextmanager
def task_gc_pacing() -> Iterator[None]:
    """Raise the collector's thresholds for one task (see the module docstring)."""
    previous = gc.get_threshold()
    if not gc.isenabled() or previous[0] == 0 or previous[0] >= TASK_GEN0_THRESHOLD:
        yield
        return
    gc.set_threshold(TASK_GEN0_THRESHOLD, max(previous[1], TASK_OLDER_THRESHOLDS[0]),
                     max(previous[2], TASK_OLDER_THRESHOLDS[1]))
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def paced(loop: Iterator[T]) -> Iterator[T]:
    """``loop`` with the collector paced for bulk row work while it runs."""
    with task_gc_pacing():
        yield from loop
