"""Changing a stateful query and keeping its state.

:func:`check_upgrade` plans a changed query with Spark's own planner, without running it, and
compares each stateful operator with what the checkpoint holds: compatible as is, needs a
migration (and which), or incompatible, with the error Spark would raise at start.

Modules: :mod:`.held` (the checkpoint's side), :mod:`.spark_plan` (the new query's side, and
Spark's own verdicts), :mod:`.schema_changes` (differences in words), :mod:`.verdicts` (the
rules), :mod:`.check` (the entry point).
"""

from .check import OUTPUT_MODES, QueryLoadError, check_upgrade, load_query_builder
from .spark_plan import SparkRefusal, UpgradeCheckUnsupported
from .verdicts import COMPATIBLE, INCOMPATIBLE, MIGRATION, OperatorVerdict, UpgradeReport

__all__ = ["COMPATIBLE", "INCOMPATIBLE", "MIGRATION", "OUTPUT_MODES", "OperatorVerdict", "QueryLoadError",
           "SparkRefusal", "UpgradeCheckUnsupported", "UpgradeReport", "check_upgrade", "load_query_builder"]
