"""Which keyed and checkpointed functions a query builder plans: the plans the entry points
(:mod:`.api`) build, recorded while a recorder is active. The upgrade check
(:mod:`spark_state.upgrade.spark_plan`) runs the new query's builder inside :func:`recorded_plans`
to learn each function's name, kind, key columns and max parallelism without running anything.

A ``ContextVar``, so that concurrent builders in other threads record nothing of each other's;
outside a recorder, :func:`record` does nothing.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator, Optional

from .plan import ProcessPlan

__all__ = ["record", "recorded_plans"]

_RECORDER: ContextVar[Optional[list[ProcessPlan]]] = ContextVar("spark_state_recorded_plans", default=None)


@contextlib.contextmanager
def recorded_plans() -> Iterator[list[ProcessPlan]]:
    """The plans built while the block runs, in the order built."""
    plans: list[ProcessPlan] = []
    token = _RECORDER.set(plans)
    try:
        yield plans
    finally:
        _RECORDER.reset(token)


def record(plan: ProcessPlan) -> None:
    """Record ``plan`` if a recorder is active (an entry point's last step)."""
    plans = _RECORDER.get()
    if plans is not None:
        plans.append(plan)
