"""The documented time model, replayed in plain Python (no spark-state): the input's event times
and the watermark of each batch, which the expected outputs of ``one_input`` and ``two_inputs``
are computed from.

The watermark of batch ``B`` is ``max(W(B-1), max event time of batches < B - delay)``, 0 at
first; due event-time timers fire (time order) before the batch's rows; rows with event time
``<= W(B)`` are late. After the last input batch, one more batch runs without input when the
watermark it would have is above the last batch's and an event-time timer is due at it
(spark-state's tick source; :func:`model_batches`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence

from pyspark.sql.types import StringType, StructField, StructType, TimestampType


EVENTS_SCHEMA = StructType([StructField("user", StringType()), StructField("url", StringType()),
                            StructField("ts", TimestampType())])
EPOCH = dt.datetime(2024, 1, 1)
EPOCH_MS = int(EPOCH.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def at(ms: int) -> dt.datetime:
    """The event time ``EPOCH + ms`` as a naive UTC datetime (what the input files hold)."""
    return EPOCH + dt.timedelta(milliseconds=ms)


def ms_of(t: dt.datetime) -> int:
    return EPOCH_MS + int((t - EPOCH) / dt.timedelta(milliseconds=1))


def watermarks(batches: Sequence[Sequence[Any]], ts_of, delay_ms: int) -> list[int]:
    """The documented watermark of each batch (0 first, never backwards)."""
    out, w, max_ev = [], 0, None
    for rows in batches:
        if max_ev is not None:
            w = max(w, max_ev - delay_ms)
        out.append(w)
        for r in rows:
            t = ts_of(r)
            if t is not None and (max_ev is None or t > max_ev):
                max_ev = t
    return out


def model_batches(batches: Sequence[Sequence[Any]], ts_of, delay_ms: int, pending) -> Iterable[tuple[int, Any, int]]:
    """``(batch id, rows, watermark)`` of each input batch, then of the batch without input that
    runs after them when its watermark is above the last one and some event-time timer in
    ``pending()`` (called after the last input batch was modelled) is due at it."""
    ws = watermarks(list(batches) + [[]], ts_of, delay_ms)
    n = len(batches)
    for b, rows in enumerate(batches):
        yield b, rows, ws[b]
    if n and ws[n] > ws[n - 1] and any(t <= ws[n] for t in pending()):
        yield n, [], ws[n]


def flatten(batches: dict[int, list]) -> list:
    return sorted(r for rows in batches.values() for r in rows)


def rows_by_batch(batches: dict[int, Iterable]) -> dict[int, list]:
    return {b: sorted(rows) for b, rows in batches.items()}
