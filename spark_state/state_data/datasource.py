"""The state of keyed functions as a Spark data source: ``spark.read.format("spark-state")``.

::

    from spark_state.state_data import register_data_sources
    register_data_sources(spark)                      # once per session (Spark 4.0+; :mod:`.register`)
    spark.read.format("spark-state").option("stateVarName", "count").load("/ckpt")
    spark.sql("CREATE TEMPORARY VIEW counts USING `spark-state` OPTIONS (path '/ckpt', stateVarName 'count')")

Options (:data:`OPTIONS`) are named like those of Spark's ``statestore`` source where the concept
is the same. What is read: keyed state ``stateVarName`` (Spark's name of a
``transformWithState`` state variable), the timers (``readRegisteredTimers``), the changes of
keyed state (``readChangeFeed``), or a function's operator state (``operatorStateName``). The
rows are those of the Python functions (:func:`~.read.read_keyed_state`,
:func:`~.read.read_timers`, :func:`~.change_feed.read_change_feed`,
:func:`~.function_operator_state.read_function_operator_state`) on the same path, options and
batch: the source runs their jobs (:mod:`.partition_jobs`), one input partition per partition
store. One difference, as in Spark: ``flattenCollectionTypes`` defaults to true.

Storage options (``s3.*``, ``retry.*``, ``hdfs.*``) pass through to the storage; Spark hands a
data source its option keys in lower case, which the storage options already are.

The classes live in :mod:`.datasource_classes`, which needs ``pyspark.sql.datasource`` (Spark
4.0+), registered by :mod:`.register`; this module checks the options and plans the read on the
driver.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping, Optional

from ..options import parse_bool
from .change_feed import plan_change_feed
from .errors import StateDataError
from .function_operator_state import plan_function_operator_state
from .metadata import state_metadata
from .partition_jobs import PartitionJob
from .read import plan_keyed_state, plan_timers

__all__ = ["METADATA_NAME", "METADATA_OPTIONS", "NAME", "OPTIONS", "STORAGE_PREFIXES", "metadata_from_options",
           "parse_options", "plan_from_options"]

#: The data sources' short names.
NAME = "spark-state"
METADATA_NAME = "spark-state-metadata"
#: Option -> (Spark ``statestore`` counterpart, meaning). Keys are matched without case.
OPTIONS: dict[str, tuple[str, str]] = {
    "path": ("path", "the checkpoint or savepoint directory (also .load(path))"),
    "stateVarName": ("stateVarName", "the keyed state to read"),
    "functionName": ("(operatorId)", "the keyed function (optional when the query has one)"),
    "batchId": ("batchId", "the committed batch to read (default: the last; a savepoint's batch)"),
    "flattenCollectionTypes": ("flattenCollectionTypes", "list and map state (stateVarName): a row per element or "
                                                          "entry (default true; a change feed's rows hold the whole "
                                                          "list or map)"),
    "readRegisteredTimers": ("readRegisteredTimers", "read the function's timers instead of a state"),
    "readChangeFeed": ("readChangeFeed", "read the changes batches made to stateVarName"),
    "changeStartBatchId": ("changeStartBatchId", "the change feed's first batch (with readChangeFeed)"),
    "changeEndBatchId": ("changeEndBatchId", "the change feed's last batch (default: the last committed)"),
    "operatorStateName": ("-", "read this operator state (list, union list or broadcast) of the function"),
    "processRoot": ("-", "where state written under a process root is (as process_root=)"),
    "allowPickle": ("-", "decode pickled values (trusted storage only)"),
}
#: Option prefixes passed through as storage options.
STORAGE_PREFIXES = ("s3.", "retry.", "hdfs.")
#: Options of Spark's ``statestore`` source that read Spark's own operators.
_SPARK_OPERATOR_OPTIONS = ("operatorid", "storename", "joinside", "snapshotstartbatchid", "snapshotpartitionid")


#: The options of ``format("spark-state-metadata")`` (and the storage options).
METADATA_OPTIONS = ("path", "processRoot")


def parse_options(options: Mapping[str, str], valid: tuple[str, ...] = tuple(OPTIONS),
                  source: str = NAME) -> tuple[dict[str, str], dict[str, str]]:
    """``(options by canonical name, storage options)`` of data source ``source``, whose options
    are ``valid``.

    :raises StateDataError: an unknown option (the message lists the valid ones)."""
    canonical = {name.lower(): name for name in valid}
    known: dict[str, str] = {}
    storage: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low.startswith(STORAGE_PREFIXES):
            storage[low] = value
        elif low in canonical:
            known[canonical[low]] = value
        elif low in _SPARK_OPERATOR_OPTIONS:
            raise StateDataError(
                f"option {key!r} selects one of Spark's own operators, which format('statestore') reads (Spark 4.0+; "
                "spark_state.state_data.read_operator_state also reads savepoints); format('spark-state') reads "
                "keyed functions")
        else:
            close = difflib.get_close_matches(low, list(canonical), n=1)
            hint = f" (did you mean {canonical[close[0]]!r}?)" if close else ""
            raise StateDataError(
                f"unknown option {key!r} of format('{source}'){hint}; valid options: {', '.join(valid)}, and storage "
                f"options {', '.join(p + '*' for p in STORAGE_PREFIXES)}")
    return known, storage


def plan_from_options(options: Mapping[str, str]) -> PartitionJob:
    """The read ``options`` ask for, as the Python function's job (driver side).

    :raises StateDataError: unknown, missing or conflicting options."""
    known, storage = parse_options(options)
    path = known.get("path")
    if not path:
        raise StateDataError(f"format('{NAME}') needs the checkpoint or savepoint directory: .load(path) or the "
                             "path option")
    state = known.get("stateVarName")
    timers = _bool(known, "readRegisteredTimers", False)
    feed = _bool(known, "readChangeFeed", False)
    operator_state = known.get("operatorStateName")
    chosen = [n for n, on in (("stateVarName", state is not None),
                              ("readRegisteredTimers", timers), ("operatorStateName", operator_state is not None))
              if on]
    if len(chosen) != 1:
        raise StateDataError(f"format('{NAME}') reads one thing: give exactly one of stateVarName, "
                             f"readRegisteredTimers=true or operatorStateName (given: {', '.join(chosen) or 'none'})")
    common: dict[str, Any] = {"function": known.get("functionName"), "storage_options": storage,
                              "process_root": known.get("processRoot")}
    pickle = _bool(known, "allowPickle", False)
    batch = _int(known, "batchId")
    change_options = [n for n in ("changeStartBatchId", "changeEndBatchId") if n in known]
    if "flattenCollectionTypes" in known and (state is None or (feed and _bool(known, "flattenCollectionTypes", True))):
        # the option would be ignored: say so rather than give rows of another shape than asked
        raise StateDataError(
            "flattenCollectionTypes applies to stateVarName reads: timers and operator state have a row per timer or "
            "element, and a change feed's row holds the whole list or map (leave the option out, or set it false)")
    if feed:
        if state is None or operator_state is not None:
            raise StateDataError("readChangeFeed reads the changes of a keyed state: give stateVarName")
        if batch is not None:
            raise StateDataError("readChangeFeed reads batches changeStartBatchId..changeEndBatchId: give "
                                 "changeEndBatchId, not batchId")
        start = _int(known, "changeStartBatchId")
        if start is None:
            raise StateDataError("readChangeFeed needs changeStartBatchId (the first batch of the feed)")
        return plan_change_feed(path, state, start_batch=start, end_batch=_int(known, "changeEndBatchId"),
                                allow_pickle=pickle, **common)
    if change_options:
        raise StateDataError(f"{', '.join(change_options)} go with readChangeFeed=true")
    if timers:
        return plan_timers(path, batch=batch, **common)
    if operator_state is not None:
        return plan_function_operator_state(path, operator_state, batch=batch, allow_pickle=pickle, **common)
    assert state is not None
    return plan_keyed_state(path, state, batch=batch, allow_pickle=pickle,
                            flatten_collection_types=_bool(known, "flattenCollectionTypes", True), **common)


def metadata_from_options(options: Mapping[str, str]) -> list[dict[str, Any]]:
    """The rows of ``format("spark-state-metadata")`` (:func:`~.metadata.state_metadata`).

    :raises StateDataError: an unknown option, or no path."""
    known, storage = parse_options(options, METADATA_OPTIONS, METADATA_NAME)
    if not known.get("path"):
        raise StateDataError(f"format('{METADATA_NAME}') needs the checkpoint or savepoint directory: .load(path)")
    return state_metadata(known["path"], storage_options=storage, process_root=known.get("processRoot"))


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = parse_bool(raw)
    if value is None:
        raise StateDataError(f"option {name} must be true or false, got {raw!r}")
    return value


def _int(options: Mapping[str, str], name: str) -> Optional[int]:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise StateDataError(f"option {name} must be a batch id (an integer), got {raw!r}") from None
