"""What a task runs: the function, its options and the phases of the keyed loop in use.

Built on the driver by the entry points (:mod:`.api`), pickled into the ``mapInArrow``
closure, read by the tasks (:mod:`.runner`, :mod:`.keyed_loop`). Everything here is frozen:
a plan describes an operator, it holds no task state.

The keyed loop (:mod:`.keyed_loop`) is one loop; a plan enables its optional phases:

=================  ==========================================================================
phase              enabled when
=================  ==========================================================================
time               an input declares event time (``withWatermark``) or the function defines
                   ``on_timer``: the batch's clock, due timers, late rows, event-time maxima
operator state     the function defines ``initialize_state`` / ``snapshot_state``
broadcast          ``keyed_broadcast_process``: broadcast states, rows applied before keyed rows
two inputs         ``keyed_co_process``: rows of side 2 go to ``process_element2``
bootstrap          a bootstrap task (:mod:`spark_state.state_data.writers.bootstrap`): the time phase
                   without firing; timers of both domains may be registered for the query
                   that restores the state
=================  ==========================================================================

A plan with ``sides`` reads the input by side (tagged union, :mod:`.inputs`); a plan without
``sides`` and without phases is the plain keyed loop's one untagged input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pyspark.sql.types import StructField, StructType

from ..config import EngineConfig
from ..state import MapStateDescriptor
from .inputs import InputSide
from .location import LocationSpec
from .observation import with_observation
from .options import ProcessOptions

KEYED, OPERATOR = "keyed", "operator"


@dataclass(frozen=True)
class BroadcastSpec:
    """The broadcast phase: the states ``process_broadcast_element`` writes, and the columns
    that order a batch's broadcast rows (then the whole row's ``repr``)."""

    states: tuple[MapStateDescriptor, ...]
    order: tuple[str, ...] = ()


@dataclass(frozen=True)
class Phases:
    """The optional phases of the keyed loop in use (see the module docstring)."""

    #: the function defines ``on_timer``: due timers fire before the rows
    timers: bool = False
    #: some input declares event time: late rows, event-time maxima, the watermark
    event_time: bool = False
    operator_state: bool = False
    broadcast: Optional[BroadcastSpec] = None
    #: ``keyed_co_process``: two keyed inputs, ``process_element1`` / ``process_element2``
    two_inputs: bool = False
    #: a bootstrap task: timers are registered (both domains, with or without ``on_timer``)
    #: for the query that restores the state; none fires
    bootstrap: bool = False

    @property
    def time(self) -> bool:
        """The time phase: the batch's clock and the timer service."""
        return self.timers or self.event_time or self.bootstrap

    @property
    def operator_keyspace(self) -> bool:
        """The function's store holds operator state (under 0xFE): its own, or broadcast states.
        Rescale then redistributes it, and the loop runs the operator-state phase."""
        return self.operator_state or self.broadcast is not None

    @property
    def any(self) -> bool:
        return self.time or self.operator_keyspace or self.two_inputs


@dataclass(frozen=True)
class ProcessPlan:
    """Everything a task needs (see the module docstring)."""

    kind: str  # KEYED or OPERATOR
    function: Any
    options: ProcessOptions
    #: key columns (keyed operators; of the first input for two inputs)
    key_fields: tuple[StructField, ...] = ()
    #: the inputs as tagged in the tasks' Arrow input; empty: one untagged keyed input, no phases
    sides: tuple[InputSide, ...] = ()
    phases: Phases = field(default_factory=Phases)

    # the options a task reads most, by name
    @property
    def function_name(self) -> str:
        return self.options.function_name

    @property
    def location(self) -> LocationSpec:
        return self.options.location

    @property
    def engine(self) -> EngineConfig:
        """The engine of this process's tasks (:meth:`ProcessOptions.task_engine`)."""
        return self.options.task_engine()

    @property
    def parallelism(self) -> int:
        return self.options.parallelism

    @property
    def max_parallelism(self) -> Optional[int]:
        return self.options.max_parallelism

    @property
    def output_schema(self) -> StructType:
        return self.options.output_schema

    @property
    def key_record(self) -> Optional[dict[str, list]]:
        """The key columns as the state location records them (:func:`.location.verify_location`):
        names and Spark simple-string types; None for operator state."""
        if not self.key_fields:
            return None
        return {"columns": [f.name for f in self.key_fields],
                "types": [f.dataType.simpleString() for f in self.key_fields]}

    @property
    def event_delays(self) -> dict[str, int]:
        """Watermark delay (ms) per input side with event time, by side tag as a string (the
        clock's and the observation's keys)."""
        return {str(s.tag): s.event_time.delay_ms for s in self.sides if s.event_time is not None}

    @property
    def task_schema(self) -> StructType:
        """The ``mapInArrow`` schema: the output and the tasks' observation (:mod:`.observation`)."""
        return with_observation(self.output_schema, self.event_delays)
