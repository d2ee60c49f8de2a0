"""The JVM's heap while a query runs, read through the session's py4j gateway.

Three figures, because "memory" means three things here:

* **peak used heap** -- the most the heap held at any sample (garbage included: what a smaller
  heap would have had to collect sooner);
* **live set** -- the largest old generation right after a collection (``getCollectionUsage``
  of the old-generation pool): what survives, which is what "flat" is about;
* **held** -- the heap used right after a full collection forced every ``held_every`` seconds
  (``System.gc()``, a full collection on G1): the heap a batch holds, garbage excluded. Forcing
  collections slows the run, so it is off unless asked for.

Samples run in a daemon thread every ``interval_s``; :meth:`HeapSampler.take_batch` returns the
peaks since the previous call (per batch) while the live set stays a peak over the run.
"""

from __future__ import annotations

import threading
import time

MB = 2 ** 20


class HeapSampler:
    """Samples the heap of ``spark``'s JVM (the driver's; in local mode also the executor's)."""

    def __init__(self, spark, interval_s: float = 0.25, held_every_s: float = 0) -> None:
        management = spark._jvm.java.lang.management.ManagementFactory
        self._jvm = spark._jvm
        self._memory = management.getMemoryMXBean()
        self._old_gen = [p for p in management.getMemoryPoolMXBeans()
                         if "Old Gen" in p.getName() or "Tenured" in p.getName()]
        self._interval_s = interval_s
        self._held_every_s = held_every_s
        self._stop = threading.Event()
        self.peaks = {"heap": 0, "old_after_gc": 0, "held": 0}

    def start(self) -> "HeapSampler":
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def take_batch(self) -> dict:
        """The peaks (bytes) since the last call: ``heap_peak_bytes``, ``held_peak_bytes``, and
        ``old_after_gc_peak_bytes`` since the start."""
        out = {"heap_peak_bytes": self.peaks["heap"], "old_after_gc_peak_bytes": self.peaks["old_after_gc"],
               "held_peak_bytes": self.peaks["held"]}
        self.peaks["heap"] = self.peaks["held"] = 0
        return out

    def _run(self) -> None:
        last_full_gc = time.monotonic()
        while not self._stop.is_set():
            try:
                self.peaks["heap"] = max(self.peaks["heap"], self._memory.getHeapMemoryUsage().getUsed())
                if self._held_every_s and time.monotonic() - last_full_gc >= self._held_every_s:
                    self._jvm.java.lang.System.gc()
                    self.peaks["held"] = max(self.peaks["held"], self._memory.getHeapMemoryUsage().getUsed())
                    last_full_gc = time.monotonic()
                for pool in self._old_gen:
                    usage = pool.getCollectionUsage()
                    if usage is not None:
                        self.peaks["old_after_gc"] = max(self.peaks["old_after_gc"], usage.getUsed())
            except Exception:  # the JVM is going away
                return
            self._stop.wait(self._interval_s)


def gc_time_ms(spark) -> int:
    """Milliseconds the JVM has spent in garbage collection so far (every collector)."""
    management = spark._jvm.java.lang.management.ManagementFactory
    return sum(c.getCollectionTime() for c in management.getGarbageCollectorMXBeans())


def heap_after_full_gc(spark) -> tuple[float, float]:
    """A full collection, then the heap used and the heap committed (MB): what the JVM holds, and
    what it has taken from the system (its pages count in RSS once touched)."""
    lang = spark._jvm.java.lang
    lang.System.gc()
    runtime = lang.Runtime.getRuntime()
    return (runtime.totalMemory() - runtime.freeMemory()) / MB, runtime.totalMemory() / MB


def jvm_pid(spark) -> int:
    """The process id of the session's JVM."""
    return spark._jvm.java.lang.ProcessHandle.current().pid()
