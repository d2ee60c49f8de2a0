"""The timer service of keyed functions (``ctx.timer_service()``) and the firing of due timers.

Semantics (Flink's, at micro-batch boundaries):

* One timer per (key, timestamp, domain): registering it again is a no-op, deleting a timer
  that does not exist is a no-op. Timers are registered for ``ctx.current_key`` only, from
  ``process_element`` or ``on_timer``.
* **When timers fire.** At the start of every task of a batch, after the partition's state is
  loaded and before any row of the batch: first every event-time timer with
  ``timestamp <= watermark`` of the batch, then every processing-time timer with
  ``timestamp <= processing time`` of the batch (see :mod:`.clock`), each domain in time order
  (ties: key group, then key bytes) across the partition's key groups. A timer that
  ``on_timer`` registers and that is already due (``<=`` the bound being fired) fires in the
  same pass, in its time order, as in Flink's ``advanceWatermark`` loop. A timer registered
  while *rows* are processed fires at the next batch, even if already due: Flink fires
  event-time timers when a watermark arrives between elements, and a micro-batch's watermark
  arrives with the batch, so firing everything due before the rows is the micro-batch
  equivalent.
* **Exactly once.** Firing deletes the timer's entry in the store's pending epoch; the state
  changes ``on_timer`` makes go to the same epoch; both are committed with the batch's
  version or dropped with it (a failed task's retry fires the same timers again from the
  last committed version).
* Times are epoch milliseconds. ``current_watermark()`` and ``current_processing_time()`` are
  the batch's (identical in every task and attempt of the batch), not a wall clock that moves
  while the batch runs.
"""

from __future__ import annotations

import heapq
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Optional

from ..state.key_context import KeyContext
from ..state.timers import EVENT_TIME, PROCESSING_TIME, TimerQueue, check_timestamp
from ..engine.store import VersionedStore
from .clock import BatchTime
from .errors import ProcessDefinitionError


class TimeDomain(Enum):
    """The domain of a firing timer (``ctx.time_domain()`` in ``on_timer``)."""

    EVENT_TIME = EVENT_TIME
    PROCESSING_TIME = PROCESSING_TIME


class TimerService:
    """Flink's ``TimerService`` for the current key of one task: timers live in ``store``
    (:class:`~spark_state.state.timers.TimerQueue`), the current key is ``key_context``'s
    (read when registering, set when firing)."""

    def __init__(self, store: VersionedStore, key_context: KeyContext, clock: Callable[[], BatchTime], *,
                 event_time: bool, fires: bool, function_name: str) -> None:
        self._queue = TimerQueue(store)
        self._keys = key_context
        self._clock_fn = clock
        self._clock: Optional[BatchTime] = None
        self._event_time = event_time
        self._fires = fires
        self._function = function_name
        #: False while no key is in scope (``process_broadcast_element``, ``open``).
        self.keyed = False
        self._heap: Optional[list] = None
        self._firing_domain = -1
        self._bound = 0
        #: timers fired by this task
        self.fired = 0

    # ------------------------------------------------------------------ time
    def batch_time(self) -> BatchTime:
        if self._clock is None:
            self._clock = self._clock_fn()
        return self._clock

    @property
    def time_read(self) -> Optional[BatchTime]:
        """The batch's time if this task read it (None: nothing asked for it)."""
        return self._clock

    def current_watermark(self) -> int:
        """The batch's watermark (epoch ms; 0 before any event time was seen, as in Spark)."""
        return self.batch_time().watermark_ms

    def current_processing_time(self) -> int:
        """The batch's processing time (epoch ms), the same in every task of the batch."""
        return self.batch_time().processing_time_ms

    # ------------------------------------------------------------------ timers
    def register_event_time_timer(self, ts: int) -> None:
        """Fire ``on_timer(ts, ctx)`` for the current key once the watermark reaches ``ts``."""
        if not self._event_time:
            raise ProcessDefinitionError(
                f"{self._function} registers an event-time timer, but its input declares no event "
                "time: pass df.withWatermark('<timestamp column>', '<delay>') to the operator")
        self._register(EVENT_TIME, ts)

    def register_processing_time_timer(self, ts: int) -> None:
        """Fire ``on_timer(ts, ctx)`` for the current key at the first batch whose processing
        time is ``>= ts`` (while the sources are idle too: spark-state's tick source makes Spark run
        a batch when the earliest processing-time timer is due, at the query's trigger interval)."""
        self._register(PROCESSING_TIME, ts)

    def delete_event_time_timer(self, ts: int) -> None:
        self._delete(EVENT_TIME, ts)

    def delete_processing_time_timer(self, ts: int) -> None:
        self._delete(PROCESSING_TIME, ts)

    def _scope(self, what: str) -> tuple[int, bytes]:
        if not self.keyed:
            raise ProcessDefinitionError(
                f"{self._function}: {what} needs a current key; call it from process_element or on_timer")
        k = self._keys
        return k.key_group, k.key

    def _register(self, domain: int, ts: int) -> None:
        ts = check_timestamp(ts)
        if not self._fires:
            raise ProcessDefinitionError(
                f"{self._function} registers a timer but does not define on_timer(timestamp, ctx); "
                "define it to receive the timer")
        kg, key = self._scope("registering a timer")
        self._queue.register(kg, key, domain, ts)
        if self._heap is not None and domain == self._firing_domain and ts <= self._bound:
            heapq.heappush(self._heap, (ts, kg, key))

    def _delete(self, domain: int, ts: int) -> None:
        ts = check_timestamp(ts)
        kg, key = self._scope("deleting a timer")
        self._queue.delete(kg, key, domain, ts)

    def earliest(self, key_groups: Iterable[int], domain: int) -> Optional[int]:
        """The earliest pending timer of ``domain`` in ``key_groups`` (one seek per key group)."""
        found = [ts for ts in map(lambda kg: self._queue.earliest(kg, domain), key_groups) if ts is not None]
        return min(found) if found else None

    # ------------------------------------------------------------------ firing
    def fire_due(self, key_groups: Iterable[int], on_timer: Callable[[int, Any], Optional[Iterable[Any]]],
                 ctx: Any, decode_key: Callable[[bytes], Any]) -> Iterator[Iterable[Any]]:
        """Fire every due timer of ``key_groups`` (see the module docstring); yields what each
        ``on_timer`` call returned. Sets the current key, ``ctx.current_key``,
        ``ctx.current_key_group`` and the context's timer fields before each call."""
        clock = self.batch_time()
        groups = list(key_groups)
        bounds = []
        if self._event_time:
            bounds.append((EVENT_TIME, clock.watermark_ms))
        bounds.append((PROCESSING_TIME, clock.processing_time_ms))
        queue = self._queue
        set_key = self._keys.set_current_key
        for domain, bound in bounds:
            # The due timers of every key group, merged lazily in (timestamp, key group, key) order:
            # each group's are read in time order from the store (a snapshot taken when its scan
            # starts), so memory does not grow with the number of timers due. Timers that on_timer
            # registers and that are already due go to `registered`, a heap merged in as they come.
            stored = heapq.merge(*[_due_in(queue, kg, domain, bound) for kg in groups])
            registered: list[tuple[int, int, bytes]] = []
            self._heap, self._firing_domain, self._bound = registered, domain, bound
            try:
                next_stored = next(stored, None)
                while next_stored is not None or registered:
                    if registered and (next_stored is None or registered[0] < next_stored):
                        ts, kg, key = heapq.heappop(registered)
                    else:
                        assert next_stored is not None
                        ts, kg, key = next_stored
                        next_stored = next(stored, None)
                    if not queue.exists(kg, key, domain, ts):
                        continue  # deleted by an earlier on_timer, or a timer both stored and registered
                    queue.delete(kg, key, domain, ts)
                    self.fired += 1
                    set_key(key, kg)
                    ctx.current_key = decode_key(key)
                    ctx.current_key_group = kg
                    ctx._timer_firing(domain, ts)
                    self.keyed = True
                    produced = on_timer(ts, ctx)
                    if produced is not None:
                        yield produced
            finally:
                self._heap, self._firing_domain = None, -1
                ctx._timer_firing(None, None)
                self.keyed = False


def _due_in(queue: TimerQueue, key_group: int, domain: int, bound: int) -> Iterator[tuple[int, int, bytes]]:
    """``(timestamp, key group, key)`` of the due timers of one key group, in time order."""
    for ts, key in queue.due(key_group, domain, bound):
        yield ts, key_group, key
