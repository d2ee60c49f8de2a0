"""Keyed and checkpointed functions in a carry-over (:mod:`.carry_over`): a function's new key
(:class:`FunctionKeyChange`, its states' and timers' rows in the new key) and the functions the new
query adds (:func:`added_functions`: an empty state each, and their tick sources' places in
Spark's logs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ..ops import savepoint_format as F
from ..ops.process_locations import CHECKPOINT, EXPLICIT, ROOT
from ..process.location import CHECKPOINT_DIR
from ..process.ticks import tick_source_name
from ..state_data.errors import StateDataError
from ..state_data.location.savepoints import SavepointSource
from ..state_data.readers.keyed_state import read_keyed_state, read_timers
from ..state_data.writers.function_rekey import TIMER_COLUMNS
from ..state_data.writers.keyed_state_surgery import keyed_state_names
from .held import HeldState
from .key_change import KeyChange, rekeyed_columns
from .spark_plan import PlannedQuery

__all__ = ["FunctionKeyChange", "added_functions", "new_function_names"]


@dataclass(frozen=True)
class FunctionKeyChange:
    """A keyed function's new key (:meth:`CarryOver.change_function_key`)."""

    source: SavepointSource
    key: tuple[str, ...]
    change: KeyChange
    types: Mapping[str, str]
    merge: Optional[Callable[[str, DataFrame], DataFrame]]

    def rows(self, spark: SparkSession, savepoint: str, options: Mapping[str, str]
             ) -> tuple[list[T.StructField], dict[str, DataFrame], DataFrame]:
        """The new key's fields, each keyed state's rows and the timers' rows in the new key (lazy:
        nothing runs yet); refused before anything is written (see change_function_key)."""
        name = self.source.function
        old = list(self.source.key_columns.columns)
        where = f"keyed function {name!r}"
        states: dict[str, DataFrame] = {}
        fields: list[T.StructField] = []
        for state in sorted(keyed_state_names(self.source)):
            rows = read_keyed_state(spark, savepoint, state, function=name, storage_options=options)
            rows, dropped = rekeyed_columns(rows.select(*old, "value"), old, self.key, self.change, self.types, where)
            if dropped:
                if self.merge is None:
                    raise StateDataError(
                        f"{where}: the new key drops {', '.join(f'`{c}`' for c in dropped)}, so the rows of several "
                        "old keys meet under one new key: give merge=function(state, rows) -> one row per key")
                rows = self.merge(state, rows)
            states[state] = rows
            fields = [rows.schema[c] for c in self.key]
        timers = read_timers(spark, savepoint, function=name, storage_options=options)
        timers, _ = rekeyed_columns(timers.select(*old, *TIMER_COLUMNS), old, self.key, self.change, self.types,
                                    where)
        fields = fields or [timers.schema[c] for c in self.key]
        return fields, states, timers.dropDuplicates()


def new_function_names(held: HeldState, planned: PlannedQuery) -> list[str]:
    """The new query's keyed and checkpointed functions the savepoint does not hold."""
    return sorted(n for n in planned.functions if n not in held.functions)


def added_functions(held: HeldState, planned: PlannedQuery, manifest: F.SavepointManifest
                    ) -> tuple[list[F.ProcessEntry], list[int]]:
    """The manifest entries of the new query's functions the savepoint does not hold (an empty
    state each, where the new query keeps it), and the indices of their tick sources among the
    new query's sources (:func:`~spark_state.state_data.writers.keyed_state_surgery.with_sources`).

    Raises:
        StateDataError: the new query lacks a function of the savepoint (remove it first), or
            its sources differ from the savepoint's otherwise than by the new tick sources.
    """
    removed = sorted(n for n in held.functions if n not in planned.functions)
    if removed:
        raise StateDataError(
            f"the new query has no function {', '.join(removed)}: remove it from the savepoint first "
            f"(SavepointTransform(spark, savepoint).remove_function({removed[0]!r}, tick_source=<the index of its "
            "tick source among the query's sources>).write(...)), then carry that savepoint over")
    added = new_function_names(held, planned)
    sources = planned.sources or ()
    ticks = {tick_source_name(n): n for n in added}
    inserted = [i for i, name in enumerate(sources) if name in ticks]
    held_sources = len(held.offsets.source_lines)
    if sorted(ticks[sources[i]] for i in inserted) != added or len(sources) - len(inserted) != held_sources:
        raise StateDataError(
            f"the new query has {len(sources)} sources ({', '.join(sources)}) and the savepoint's {held_sources}: "
            "besides the tick sources of new functions, a query's sources are kept as they are")
    entries = []
    for name in added:
        function = planned.functions[name]
        spec = function.location
        if spec is not None and spec.explicit:
            placement, location, root = EXPLICIT, spec.explicit, None
        elif spec is not None and spec.root is not None:
            placement, location, root = ROOT, f"{spec.root.rstrip('/')}/{manifest.query_id}/{name}", spec.root
        else:
            placement, location, root = CHECKPOINT, f"{manifest.source.rstrip('/')}/{CHECKPOINT_DIR}/{name}", None
        entries.append(F.ProcessEntry(name, function.kind, function.max_parallelism, function.parallelism, location,
                                      root, placement, function.key))
    return entries, inserted
