"""A keyed function's state given a new key: every keyed state and every timer of one function of a
savepoint written again under new key columns (``user`` -> ``(user, region)``), from DataFrames of
its rows in the new key.

The key is in every entry a function holds for a key -- its states' data entries, their TTL index
entries and its timers (:mod:`spark_state.keys.keyed`, :mod:`spark_state.keys.timers`) -- and its
key group, so its partition, is the hash of the key's columns. So nothing of them is kept: the
first job starts each partition from the savepoint file without any entry of the function's keyed
states or timers (:class:`~.keyed_state_surgery.BaseEntries`; operator state, the other system
records and every other file stay), and each state's rows are then written through the state's
descriptor, rebuilt from its schema record (:mod:`.record_descriptor`), by one job per state,
each routed by the new key's key groups (:func:`~.keyed_replacement.write_routed`) and starting
from the previous job's files; a last job registers the timers. TTL-stamped values are stamped
again when written (their time to live starts over). The caller records the new key in the
savepoint's manifest, which a restore writes into the function's state location, where the
restored query's key columns are checked against it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ...keys.timers import TIMER_STATE_NAME
from ...ops import savepoint_format as F
from ...process.functions import KeyedProcessFunction
from ...process.offline import plan_offline
from ..errors import StateDataError
from ..location.savepoints import SavepointSource
from .keyed_replacement import StateWriter, offline_options, state_kind, write_routed
from .keyed_state_surgery import BaseEntries, keyed_state_records
from .record_descriptor import descriptor_of_record

__all__ = ["TIMER_COLUMNS", "rekey_function"]

#: The columns of a timer row beside the key (as :func:`~..readers.keyed_state.read_timers` reads them).
TIMER_COLUMNS = ("domain", "expiration_timestamp_ms")


class TimerWriter(KeyedProcessFunction):
    """Registers each row's timer for the current key (the rows of :func:`rekey_function`'s last job)."""

    def process_element(self, row: Any, ctx: Any) -> None:
        timers = ctx.timer_service()
        if row.domain == "event_time":
            timers.register_event_time_timer(row.expiration_timestamp_ms)
        else:
            timers.register_processing_time_timer(row.expiration_timestamp_ms)
        return None


def rekey_function(source: SavepointSource, key_fields: Sequence[T.StructField],
                   states: Mapping[str, DataFrame], timers: Optional[DataFrame], out_url: str,
                   out_options: Mapping[str, str], progress: bool = True) -> dict[int, F.FileEntry]:
    """Write ``source``'s function's partition files into the savepoint at ``out_url`` with its state
    under the key ``key_fields`` (see the module docstring): ``states`` gives every keyed state the
    savepoint records its rows (the new key's columns and ``value``, one row per key), ``timers``
    the timers (the new key's columns and :data:`TIMER_COLUMNS`). Returns the last job's files.

    Raises:
        StateDataError: a recorded state without rows, rows of a state the function does not
            record, or rows without the new key's columns.
    """
    records = keyed_state_records(source)
    if set(states) != set(records):
        raise StateDataError(
            f"function {source.function!r} records the keyed states {', '.join(sorted(records)) or 'none'}; a new "
            f"key needs the rows of each of them, got {', '.join(sorted(states)) or 'none'}")
    keys = [f.name for f in key_fields]
    for name, rows in states.items():
        missing = [c for c in (*keys, "value") if c not in rows.columns]
        if missing:
            raise StateDataError(f"the rows of state {name!r} have no column {', '.join(missing)}")
    dropped = tuple(n.encode("utf-8") for n in records) + (TIMER_STATE_NAME,)
    written: dict[int, F.FileEntry] = {}
    jobs: list[tuple[str, KeyedProcessFunction, DataFrame]] = []
    for name in sorted(states):
        descriptor = descriptor_of_record(name, records[name])
        jobs.append((name, StateWriter(descriptor, state_kind(descriptor)), states[name].select(*keys, "value")))
    if timers is not None:
        jobs.append(("timers", TimerWriter(), timers.select(*keys, *TIMER_COLUMNS)))
    if not jobs:  # a function without keyed state or timers: nothing holds the key
        raise StateDataError(f"function {source.function!r} holds no keyed state and no timers: its key holds nothing")
    for i, (label, writer, rows) in enumerate(jobs):
        base = (BaseEntries(source, dropped) if i == 0 else
                BaseEntries(source, (), chained_url=out_url, chained_options=dict(out_options)))
        plan, routed = plan_offline(rows, keys, list(key_fields), writer, offline_options(source, label))
        written = write_routed(plan, routed, source, base, out_url, out_options,
                               f"new key of {source.function}: {label}", progress)
    return written
