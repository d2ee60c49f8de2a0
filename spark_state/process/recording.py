"""Which keyed and checkpointed functions a query builder plans: the plans the entry points
(:mod:`.api`) build, recorded while a recorder is active. The upgrade check
(:mod:`spark_state.upgrade.spark_plan`) runs the new query's builder inside :func:`recorded_plans`
to learn each function's name, kind, key columns and max parallelism without running anything,
and :func:`declared_states` the keyed states its ``open`` declares.

A ``ContextVar``, so that concurrent builders in other threads record nothing of each other's;
outside a recorder, :func:`record` does nothing.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator, Optional

from ..state.descriptors import StateDescriptor
from .functions import KeyedContext
from .plan import ProcessPlan

__all__ = ["declared_states", "record", "recorded_plans"]

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


class _Declarations:
    """The state backend a recording context hands ``open``: it records each keyed state's
    descriptor and gives no usable handle (None), since no key is current there."""

    def __init__(self) -> None:
        self.found: dict[str, StateDescriptor] = {}

    def _declared(self, descriptor: StateDescriptor) -> None:
        self.found[descriptor.name] = descriptor

    get_state = get_list_state = get_map_state = get_reducing_state = get_aggregating_state = _declared


def declared_states(plan: ProcessPlan) -> dict[str, StateDescriptor]:
    """The keyed states a keyed function's ``open(ctx)`` declares, by name: ``open`` runs once on
    the driver, on the plan's own function instance, with a :class:`~.functions.KeyedContext`
    whose state handles are None (no key is current in ``open``) and without timers or broadcast
    state. Whatever ``open`` raises is raised (a function that uses those in ``open``); the
    caller says the states are unknown."""
    declarations = _Declarations()
    ctx = KeyedContext(declarations, 0, 0, plan.parallelism, plan.max_parallelism or 0, "",  # type: ignore[arg-type]
                       function_name=plan.function_name)
    plan.function.open(ctx)
    return declarations.found
