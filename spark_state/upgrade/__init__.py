"""Changing a stateful query and keeping its state.

:func:`check_upgrade` plans a changed query with Spark's own planner, without running it, and
compares each stateful operator with what the checkpoint holds: compatible as is, needs a
migration (and which), or incompatible, with the error Spark would raise at start.
:class:`CarryOver` then carries a savepoint's state over to the new query: key changes
(:class:`KeyChange`), moved, added and removed operators.

Modules: :mod:`.held` (the checkpoint's side), :mod:`.spark_plan` (the new query's side, and
Spark's own verdicts), :mod:`.schema_changes` (differences in words), :mod:`.verdicts` (the
rules), :mod:`.check` (the check's entry point), :mod:`.key_change` (a store's rows re-keyed),
:mod:`.function_changes` (keyed functions' new keys, added functions), :mod:`.carry_over` (the new
savepoint).
"""

from .carry_over import CarryOver, CarryOverResult, OperatorStep, proposed_sources
from .check import OUTPUT_MODES, QueryLoadError, check_upgrade, load_query_builder
from .key_change import KeyChange
from .spark_plan import SparkRefusal, UpgradeCheckUnsupported
from .verdicts import COMPATIBLE, INCOMPATIBLE, MIGRATION, OperatorVerdict, UpgradeReport

__all__ = ["COMPATIBLE", "INCOMPATIBLE", "MIGRATION", "OUTPUT_MODES", "CarryOver", "CarryOverResult", "KeyChange",
           "OperatorStep", "OperatorVerdict", "QueryLoadError", "SparkRefusal", "UpgradeCheckUnsupported",
           "UpgradeReport", "check_upgrade", "load_query_builder", "proposed_sources"]
