"""Retries of checkpoint storage operations: exponential backoff with full jitter, bounded in
attempts and in total time.

Options (strings, as in Spark confs; in ``EngineConfig``/Spark confs they carry the
``storage.`` prefix, e.g. ``spark.sql.streaming.stateStore.sparkState.storage.retry.attempts``):

``retry.attempts`` (default 8)
    attempts of one storage operation in total; ``1`` turns our retries off.
``retry.baseDelayMs`` (100) and ``retry.maxDelayMs`` (5000)
    the wait before retry *n* (1-based) is uniform in ``[0, min(maxDelayMs, baseDelayMs * 2**(n-1))]``
    ("full jitter": many executors throttled at once do not come back in lockstep).
``retry.timeoutMs`` (30000)
    no retry starts once this much time has passed since the operation's first attempt,
    and a wait is cut so that it ends by then.

Invariants:

* Only failures the backend classifies as *transient* are retried (S3: throttling, 5xx,
  request timeouts, dropped or reset connections, read/connect timeouts); persistent ones
  (access denied, missing bucket, bad request, a full or read-only local disk) fail at once.
* One operation makes at most ``attempts`` attempts, and starts none after ``timeoutMs``. An
  attempt in flight is never interrupted; its own length is bounded by the client's timeouts
  (S3: ``s3.connect_timeout`` / ``s3.read_timeout``), so the worst case is
  ``timeoutMs`` plus one attempt.
* Retrying is safe because every operation is: reads, listings and deletes trivially; writes
  and uploads replace the whole object atomically (an S3 PUT or multipart completion, an
  HDFS rename); create-if-absent writes resolve a conflict by reading the object back,
  because an earlier attempt whose answer was lost may have created it
  (:meth:`~spark_state.storage.remote.FsspecStorage.write_bytes`).

This module is policy only (no I/O); :mod:`.remote` runs the loop.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from ..errors import ConfigError
from ..options import storage_options

__all__ = ["RETRY_OPTIONS", "RetryBudget", "RetryPolicy", "RetryStats"]

#: Retry option -> meaning; the table with defaults is :data:`spark_state.options.OPTIONS`.
RETRY_OPTIONS = storage_options("retry.")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long one storage operation is retried (see the module docstring)."""

    attempts: int = 8
    base_delay_ms: int = 100
    max_delay_ms: int = 5000
    timeout_ms: int = 30000

    def __post_init__(self) -> None:
        for name, value, minimum in (("retry.attempts", self.attempts, 1),
                                     ("retry.baseDelayMs", self.base_delay_ms, 0),
                                     ("retry.maxDelayMs", self.max_delay_ms, 0),
                                     ("retry.timeoutMs", self.timeout_ms, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"storage option {name}={value!r} must be an integer >= {minimum}")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "RetryPolicy":
        """The policy from ``retry.*`` storage options (others are ignored).

        Raises:
            ConfigError: a value that is not a non-negative integer (naming the option).
        """
        fields = {"retry.attempts": "attempts", "retry.baseDelayMs": "base_delay_ms",
                  "retry.maxDelayMs": "max_delay_ms", "retry.timeoutMs": "timeout_ms"}
        kwargs = {}
        for key, name in fields.items():
            if key in options:
                raw = str(options[key]).strip()
                try:
                    kwargs[name] = int(raw)
                except ValueError:
                    raise ConfigError(f"storage option {key}={raw!r} must be an integer") from None
        return cls(**kwargs)

    def backoff_s(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), before the deadline cut."""
        # min() before the power would overflow: 2**(retry-1) is capped by the ratio first.
        cap_ms = float(self.max_delay_ms)
        if self.base_delay_ms > 0:
            doublings = min(retry - 1, 62)
            cap_ms = min(cap_ms, self.base_delay_ms * float(2 ** doublings))
        else:
            cap_ms = 0.0
        return rand() * cap_ms / 1000.0

    def describe(self) -> str:
        return (f"retry.attempts={self.attempts}, retry.timeoutMs={self.timeout_ms}, "
                f"retry.baseDelayMs={self.base_delay_ms}, retry.maxDelayMs={self.max_delay_ms}")


class RetryBudget:
    """The retry allowance of one operation: counts attempts and hands out waits.

    Call :meth:`next_delay` after each failed attempt whose error is transient: it returns
    the seconds to wait before the next attempt, or ``None`` when the policy is spent.
    """

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self._clock = clock
        self._rand = rand
        self._started = clock()
        self.attempts = 1  # the first attempt is under way when the budget is made

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def next_delay(self) -> Optional[float]:
        if self.attempts >= self.policy.attempts:
            return None
        remaining = self.policy.timeout_ms / 1000.0 - self.elapsed_s
        if remaining <= 0:
            return None
        delay = min(self.policy.backoff_s(self.attempts, self._rand), remaining)
        self.attempts += 1
        return delay


@dataclass
class RetryStats:
    """Counters of one storage (and its children), for logs, metrics and tests.

    ``retries`` counts whole-operation retries (the HTTP-level retries of botocore inside
    one attempt are not seen here); ``exhausted`` counts operations that failed after using
    up their budget; ``create_conflicts_resolved`` counts create-if-absent writes that found
    their own bytes already stored.
    """

    operations: int = 0
    retried_operations: int = 0
    retries: int = 0
    exhausted: int = 0
    create_conflicts_resolved: int = 0
    slept_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {k: getattr(self, k) for k in ("operations", "retried_operations", "retries", "exhausted",
                                                  "create_conflicts_resolved", "slept_s")}
