"""Which stores of Spark's own stateful operators a checkpoint or savepoint holds, and the one
chooser of an operator's store for the readers and the writers of Spark operator state.

A checkpoint's operators come from Spark's operator metadata (``state/<op>/_metadata``), a
savepoint's from its manifest; either is listed as ``{operator id: (operator name, [store
names])}``. A choice that the path does not hold is refused naming those it holds, before a
savepoint is restored or anything is written (Spark's reader would fail later with "Failed to
read the state schema").
"""

from __future__ import annotations

from typing import Mapping, Optional

from ...ops import savepoint_format as F
from ...ops.checkpoint_reader import SparkCheckpoint
from ...ops.errors import UnsupportedCheckpointError
from ..errors import UnknownStateError

__all__ = ["SparkStores", "choose_spark_store", "checkpoint_spark_stores", "savepoint_spark_stores"]

#: operator id -> (operator name, its store names)
SparkStores = Mapping[int, tuple[str, list[str]]]


def savepoint_spark_stores(manifest: F.SavepointManifest) -> SparkStores:
    """The Spark operators' stores a savepoint's manifest records."""
    return {op.id: (op.name, [s.name for s in op.stores]) for op in manifest.operators}


def checkpoint_spark_stores(path: str, storage_options: Optional[Mapping[str, str]] = None) -> Optional[SparkStores]:
    """The Spark operators' stores of a checkpoint, or None where Spark's operator metadata is a
    kind the operations tools do not read (transformWithState's v2: Spark's reader decides)."""
    try:
        operators = SparkCheckpoint(path, dict(storage_options or {})).operators()
    except UnsupportedCheckpointError:
        return None
    return {op.id: (op.name, list(op.store_names)) for op in operators}


def choose_spark_store(stores: SparkStores, operator_id: int, store_name: Optional[str], where: str) -> None:
    """Refuse operator ``operator_id`` or its store ``store_name`` (None: Spark's default store)
    when ``where`` does not hold it.

    :raises UnknownStateError: naming the operators and stores ``where`` holds."""
    there = "; ".join(f"{i} {name} (stores {', '.join(names)})" for i, (name, names) in sorted(stores.items()))
    if operator_id not in stores:
        keyed = (" (a keyed function's state is read with read_keyed_state, or format('spark-state'))"
                 if not stores else "")
        raise UnknownStateError(f"{where} holds no state of a Spark operator {operator_id}{keyed}; Spark operators: "
                                f"{there or 'none'}")
    if store_name is not None and store_name not in stores[operator_id][1]:
        raise UnknownStateError(f"Spark operator {operator_id} of {where} has no store {store_name!r}; "
                                f"Spark operators: {there}")
