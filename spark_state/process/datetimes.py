"""Arrow timestamp and date columns to Python ``datetime``/``date`` lists, fast and exactly as
``pyarrow.Array.to_pylist()`` converts them.

Why: Arrow builds each ``datetime`` with Python-level calls (``timedelta`` arithmetic, then
``tzinfo.fromutc`` for a zoned column): 6-9 us per value for Spark's zoned timestamps, more
than a keyed function's whole per-row budget. Here the calendar fields are computed for the
whole column with numpy and each value costs one C call:

* zoned, fixed offset (``+05:30``, ``UTC`` and its aliases): the wall-clock fields of
  ``utc + offset`` packed, for the whole column, into the 10-byte state ``datetime`` pickles
  itself as, then ``datetime(state, tz)`` per value (``map``, no bytecode; the constructor
  parses no arguments on that path, a third of the cost of ``datetime(y, m, d, H, M, S, us, tz)``);
* zoned with daylight-saving rules: numpy's naive UTC ``datetime`` objects, then
  ``tz.fromutc(d.replace(tzinfo=tz))`` per value -- what Arrow does, minus its arithmetic
  (the zone's own rules decide offsets and ``fold``, never a second time-zone database);
* naive timestamps and ``date32``: numpy's ``datetime64`` to object conversion (a C loop).

The ``tzinfo`` attached is the one Arrow attaches (taken from converting one value: the same
object for a named zone, an equal one for a fixed offset). Timestamps in ns and values outside
``datetime``'s range (years 1-9999) keep Arrow's conversion (and its errors).
"""

from __future__ import annotations

import datetime as dt
from itertools import repeat
from typing import Callable, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Microseconds since the epoch of 0001-01-01 00:00 and 9999-12-31 23:59:59.999999.
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999
#: Days since the epoch of 0001-01-01 and 9999-12-31.
MIN_DAY, MAX_DAY = -719_162, 2_932_896
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_US_PER_DAY = 86_400_000_000
#: IANA names of zones that are UTC at every instant (no transitions, offset 0).
_UTC_ZONE_NAMES = frozenset({
    "UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu",
    "GMT", "Etc/GMT", "GMT0", "Etc/GMT0", "GMT+0", "Etc/GMT+0", "GMT-0", "Etc/GMT-0",
    "Greenwich", "Etc/Greenwich",
})

Column = Union[pa.Array, pa.ChunkedArray]
#: ``datetime(state, tzinfo)``: the unpickling form of the constructor (see :func:`pickle_states`),
#: which the type stubs do not declare.
_FROM_STATE: Callable[[bytes, dt.tzinfo], dt.datetime] = dt.datetime  # type: ignore[assignment]


def convertible(column: Column) -> bool:
    """Whether :func:`to_pylist` has a fast path for ``column``'s type."""
    t = column.type
    return (pa.types.is_timestamp(t) and t.unit in _US_PER_UNIT) or pa.types.is_date32(t)


def to_pylist(column: Column) -> list:
    """``column.to_pylist()`` for a column :func:`convertible` accepts (see the module docstring)."""
    t = column.type
    if pa.types.is_date32(t):
        bounds = pc.min_max(column.cast(pa.int32())).as_py()
        if bounds["min"] is None or not (MIN_DAY <= bounds["min"] and bounds["max"] <= MAX_DAY):
            return column.to_pylist()
        return column.to_numpy(zero_copy_only=False).astype(object).tolist()
    if len(column) == column.null_count:
        return column.to_pylist()
    micros = column.cast(pa.int64())
    if t.unit != "us":
        try:
            micros = pc.multiply_checked(micros, _US_PER_UNIT[t.unit])
        except pa.ArrowInvalid:  # beyond int64 microseconds: far outside datetime's range
            return column.to_pylist()
    bounds = pc.min_max(micros).as_py()
    if not (MIN_US <= bounds["min"] and bounds["max"] <= MAX_US):
        return column.to_pylist()
    if not t.tz:
        return column.to_numpy(zero_copy_only=False).astype("datetime64[us]").astype(object).tolist()
    first = pc.index(pc.is_valid(column), True).as_py()
    first_value = column[first].as_py()
    tz = first_value.tzinfo
    offset = _fixed_offset_us(tz)
    if offset is None or not (MIN_US <= bounds["min"] + offset and bounds["max"] + offset <= MAX_US):
        return _localized(column, tz)
    values = _from_wall_clock(micros, offset, tz)
    if values[first] != first_value:  # pragma: no cover - a safety net, never seen
        return column.to_pylist()
    return values


def _fixed_offset_us(tz: dt.tzinfo) -> Optional[int]:
    """The zone's offset in microseconds if it never changes, else None."""
    if isinstance(tz, dt.timezone):
        return tz.utcoffset(None) // dt.timedelta(microseconds=1)
    if getattr(tz, "key", None) in _UTC_ZONE_NAMES:  # zoneinfo.ZoneInfo
        return 0
    return None


def _localized(column: Column, tz: dt.tzinfo) -> list:
    naive = column.cast(pa.timestamp(column.type.unit)).to_numpy(zero_copy_only=False)
    localize = tz.fromutc
    return [None if d is None else localize(d.replace(tzinfo=tz))
            for d in naive.astype("datetime64[us]").astype(object).tolist()]


def _from_wall_clock(micros: Column, offset: int, tz: dt.tzinfo) -> list:
    """Aware datetimes in a fixed-offset zone from UTC epoch microseconds (nulls kept)."""
    us = pc.fill_null(micros, 0).to_numpy(zero_copy_only=False).astype(np.int64) + offset
    days = np.floor_divide(us, _US_PER_DAY)
    of_day = us - days * _US_PER_DAY
    year, month, day = civil_from_days(days)
    seconds = of_day // 1_000_000
    states = pickle_states(year, month, day, seconds // 3600, seconds // 60 % 60, seconds % 60,
                           of_day - seconds * 1_000_000)
    values: list[Optional[dt.datetime]] = list(map(_FROM_STATE, states, repeat(tz)))
    if micros.null_count:
        for i in pc.indices_nonzero(pc.is_null(micros)).to_pylist():
            values[i] = None
    return values


def pickle_states(year: np.ndarray, month: np.ndarray, day: np.ndarray, hour: np.ndarray, minute: np.ndarray,
                  second: np.ndarray, micro: np.ndarray) -> list[bytes]:
    """Each value's ``datetime`` state, as ``datetime.__reduce__`` gives it and
    ``datetime(state, tzinfo)`` takes it back (CPython's C and pure-Python ``datetime`` alike):
    ``[year u16 BE][month u8][day u8][hour u8][minute u8][second u8][microsecond u24 BE]``,
    10 bytes; the month byte's high bit is ``fold``, 0 here (a fixed offset has no repeated
    wall-clock time). The fields must be in range: the constructor checks only the month."""
    state = np.empty((len(year), 10), np.uint8)
    state[:, 0] = year >> 8
    state[:, 1] = year & 0xFF
    state[:, 2] = month
    state[:, 3] = day
    state[:, 4] = hour
    state[:, 5] = minute
    state[:, 6] = second
    state[:, 7] = micro >> 16
    state[:, 8] = (micro >> 8) & 0xFF
    state[:, 9] = micro & 0xFF
    # One 10-byte void per row: numpy gives each back as `bytes`, trailing zero bytes kept.
    return state.view("V10").ravel().tolist()


def civil_from_days(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Proleptic Gregorian (year, month, day) of days since 1970-01-01, vectorized.

    Howard Hinnant's ``civil_from_days``: shift the epoch to 0000-03-01 so that leap days
    end each 400-year era's years; era, day of era, year of era, day of year, then the month
    from a March-based day of year (153 days per five months)."""
    z = days + 719_468
    era = np.floor_divide(z, 146_097)
    doe = z - era * 146_097                                          # [0, 146096]
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365  # [0, 399]
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)                  # [0, 365]
    mp = (5 * doy + 2) // 153                                        # [0, 11], March = 0
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return year, month, day
