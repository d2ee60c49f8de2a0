"""Processing-time clocks for TTL.

TTL is measured in processing time, in integer milliseconds since the Unix epoch, as in
Flink (``TtlTimeProvider``). Everything that decides expiry asks a :class:`Clock`, so tests
inject a :class:`ManualClock` and move time by hand instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of processing time."""

    def now_ms(self) -> int:
        """Current processing time in milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The wall clock of this machine (``time.time()``)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to; thread-safe. For tests and replays."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = int(now_ms)

    def advance(self, delta_ms: int) -> int:
        """Move the clock forward by ``delta_ms`` and return the new time."""
        if delta_ms < 0:
            raise ValueError(f"a clock cannot move backwards; got {delta_ms} ms")
        with self._lock:
            self._now += int(delta_ms)
            return self._now

    def __getstate__(self) -> dict:
        # A lock does not pickle; a descriptor with a TTL on a manual clock is shipped to
        # executors inside the function, where the copy gets a lock of its own.
        return {"_now": self._now}

    def __setstate__(self, state: dict) -> None:
        self._now = state["_now"]
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"


#: The clock used when none is injected.
SYSTEM_CLOCK = SystemClock()
