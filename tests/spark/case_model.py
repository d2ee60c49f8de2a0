"""What an equivalence case is (:class:`Case`), the event times its rows carry and the input
schemas: shared by the one-operator cases (``operator_cases``) and the many-key ones
(``eviction_cases``).

Event times are offsets from :data:`T0` (:func:`at`); queries emit times as epoch seconds, read
back as offsets by subtracting :data:`S0`.
"""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass, field
from typing import Callable

from streaming_harness import RunResult, ship_module_by_value

# Functions the cases run in Python workers may call these (tests/ is not on the workers' path):
# pickle them by value.
ship_module_by_value(sys.modules[__name__])

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    """Event time ``seconds`` after T0; queries emit times as epoch seconds (``cast long``)."""
    return T0 + dt.timedelta(seconds=seconds)


S0 = int(T0.timestamp())  # epoch seconds of T0, to read emitted times back as offsets


def _types():
    from pyspark.sql import types as T

    return T


def schema_kv():
    T = _types()
    return T.StructType([T.StructField("k", T.StringType()), T.StructField("v", T.LongType())])


def schema_kts():
    T = _types()
    return T.StructType(
        [T.StructField("k", T.StringType()), T.StructField("ts", T.TimestampType()), T.StructField("v", T.LongType())]
    )


def schema_id_v():
    T = _types()
    return T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.LongType())])


def schema_id_ts():
    T = _types()
    return T.StructType(
        [T.StructField("id", T.LongType()), T.StructField("ts", T.TimestampType()), T.StructField("v", T.LongType())]
    )


@dataclass
class Case:
    name: str
    schemas: list  # one StructType per source (factories are called lazily)
    batches: list  # per source: list of batches, each a list of rows
    build: Callable
    output_mode: str
    check: Callable[["Case", RunResult], None]  # asserts on the HDFS reference output
    #: whether a run stopped and restarted emits in the batches of the uninterrupted run (no
    #: watermark); with one, a run that stops ends with a no-data batch, so tests that restart
    #: compare with a reference restarted at the same batches (``reference_run(cuts=...)``)
    restart_per_batch: bool = True
    extra_confs: dict = field(default_factory=dict)

    @property
    def num_batches(self) -> int:
        return len(self.batches[0])
