"""The time of a micro-batch: its watermark and processing time, global and deterministic.

Every task of batch ``B`` must see the same watermark and processing time, and so must a
retry of the task, a speculative twin, or a re-run of the batch after a restart (at any
parallelism). Spark's own watermark is not visible to ``mapInArrow`` tasks, so spark-state
keeps its own, in the operator's state location, computed the way Spark computes its
watermark (``max event time seen - delay``, never backwards, min over inputs):

* **Event-time maxima.** A task of batch ``B`` whose input declares event time records the
  largest event time of its rows (late ones included, as Spark does) as an empty file whose
  *name* carries the value, before its state commit::

      time/watermarks/<B>/<side>.<parallelism>.<partition>.<max event ms>

  Max is idempotent: retries, speculative twins, abandoned attempts and re-runs at another
  parallelism see the same rows of batch ``B`` (Spark's offset log fixes them), so extra files
  cannot change the maximum. Batch ``B + 1`` starts only after every task of ``B`` succeeded,
  so the directory is complete when it is read.
* **The clock record** of batch ``B`` is created by the first task of the batch that needs it,
  with create-if-absent; every other task (and every later attempt) reads that record, so the
  first writer decides::

      time/clock/<B>.json  {"format": 1, "batch": B, "watermark_ms": W, "processing_time_ms": T,
                            "max_event_ms": {"<side>": M, ...}}

  ``max_event_ms`` is the maximum event time per input side over batches ``0..B-1``: the
  record of ``B - 1`` plus the files of ``B - 1``. ``W = max(W(B-1), min over sides that saw
  rows of (M(side) - delay(side)))``, 0 before any event time was seen (Spark's first
  watermark). ``T`` is the wall clock of the writer, never below ``T(B-1)``; it plays the role
  of Spark's batch timestamp, fixed when the batch first ran.
* **Retention.** The task that creates record ``B`` deletes records and maxima of batches
  ``B - RETAINED_BATCHES`` (only ``B - 1`` is ever read).

Event times are epoch milliseconds. A record of ``B - 1`` may be missing (the batch ran with
a release or a function that used no time): the maxima then start again from batch ``B - 1``'s
files and the watermark from 0.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..constants import TIME_CLOCK_DIR, TIME_MAXIMA_DIR
from ..errors import CheckpointFileMissingError
from ..storage import CheckpointStorage

_LOG = logging.getLogger(__name__)

CLOCK_DIR = TIME_CLOCK_DIR
MAXIMA_DIR = TIME_MAXIMA_DIR
FORMAT = 1
#: Batches whose records are kept (only the previous one is read).
RETAINED_BATCHES = 32
#: The watermark before any event time was seen (Spark's).
INITIAL_WATERMARK = 0


@dataclass(frozen=True)
class BatchTime:
    """The watermark and processing time of one batch (epoch milliseconds)."""

    batch: int
    watermark_ms: int
    processing_time_ms: int
    max_event_ms: Mapping[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps({"format": FORMAT, "batch": self.batch, "watermark_ms": self.watermark_ms,
                           "processing_time_ms": self.processing_time_ms,
                           "max_event_ms": dict(self.max_event_ms)}, sort_keys=True).encode()

    @staticmethod
    def decode(raw: bytes) -> "BatchTime":
        d = json.loads(raw)
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown batch clock format {d.get('format')!r}")
        return BatchTime(int(d["batch"]), int(d["watermark_ms"]), int(d["processing_time_ms"]),
                         {str(k): int(v) for k, v in d.get("max_event_ms", {}).items()})


def clock_path(batch: int) -> str:
    return f"{CLOCK_DIR}/{batch}.json"


def maxima_dir(batch: int) -> str:
    return f"{MAXIMA_DIR}/{batch}"


def record_max_event_time(storage: CheckpointStorage, batch: int, side: int, parallelism: int,
                          partition: int, max_event_ms: int) -> None:
    """Record the largest event time of one task's rows of ``batch`` on input ``side``."""
    storage.write_bytes(f"{maxima_dir(batch)}/{side}.{parallelism}.{partition}.{max_event_ms}", b"")


def _read(storage: CheckpointStorage, batch: int) -> Optional[BatchTime]:
    try:
        raw = storage.read_bytes(clock_path(batch))
    except (FileNotFoundError, CheckpointFileMissingError):
        return None
    return BatchTime.decode(raw)


def batch_maxima(storage: CheckpointStorage, batch: int) -> dict[str, int]:
    """Per side, the largest event time recorded by the tasks of ``batch``."""
    out: dict[str, int] = {}
    for name in storage.list_dir(maxima_dir(batch)):
        parts = name.split(".")
        if len(parts) != 4:
            continue  # a temporary or foreign file
        try:
            side, value = parts[0], int(parts[3])
        except ValueError:
            continue
        if side not in out or value > out[side]:
            out[side] = value
    return out


def _from_earlier_record(storage: CheckpointStorage, batch: int) -> tuple[Optional[BatchTime], dict[str, int]]:
    """No record of ``batch - 1`` (it used no time, or it was written by a tool: an in-place
    rescale's batch reads no input): continue from the newest earlier record and the maxima of
    every batch since, so the watermark never goes backwards. Without any record, the maxima
    start again from the files of ``batch - 1`` and the watermark from 0."""
    earlier = [b for b in (_record_batch(n) for n in storage.list_dir(CLOCK_DIR)) if b is not None and b < batch - 1]
    if not earlier:
        _LOG.info("no clock record before batch %d: event-time maxima start again from batch %d's files",
                  batch, batch - 1)
        return None, batch_maxima(storage, batch - 1)
    start = max(earlier)
    previous = _read(storage, start)
    maxima: dict[str, int] = {}
    for b in range(start, batch):
        for side, value in batch_maxima(storage, b).items():
            maxima[side] = max(value, maxima.get(side, value))
    return previous, maxima


def _record_batch(name: str) -> Optional[int]:
    stem, _, ext = name.partition(".")
    return int(stem) if ext == "json" and stem.isdigit() else None


def time_files(storage: CheckpointStorage, batch: int) -> list[str]:
    """The files the time of batch ``batch + 1`` is computed from (its record's predecessor and
    that batch's maxima): what a savepoint of batch ``batch`` must carry."""
    files = [clock_path(batch)] if storage.exists(clock_path(batch)) else []
    return files + [f"{maxima_dir(batch)}/{name}" for name in storage.list_dir(maxima_dir(batch))]


def compute(batch: int, previous: Optional[BatchTime], maxima: Mapping[str, int],
            delays: Mapping[str, int], now_ms: int) -> BatchTime:
    """Batch ``batch``'s time from the previous record and the previous batch's maxima (pure)."""
    max_event = dict(previous.max_event_ms) if previous else {}
    for side, value in maxima.items():
        if side not in max_event or value > max_event[side]:
            max_event[side] = value
    watermark = previous.watermark_ms if previous else INITIAL_WATERMARK
    candidates = [max_event[s] - d for s, d in delays.items() if s in max_event]
    if candidates:
        watermark = max(watermark, min(candidates))
    processing = max(now_ms, previous.processing_time_ms) if previous else now_ms
    return BatchTime(batch, watermark, processing, max_event)


def resolve(storage: CheckpointStorage, batch: int, delays: Mapping[str, int],
            now_ms: Optional[int] = None) -> BatchTime:
    """The time of ``batch``: its record if one exists, else computed and recorded
    (create-if-absent; if another task won the race, its record). ``delays`` maps each input
    side with event time to its watermark delay."""
    found = _read(storage, batch)
    if found is not None:
        return found
    previous = _read(storage, batch - 1) if batch > 0 else None
    maxima = batch_maxima(storage, batch - 1) if batch > 0 else {}
    if batch > 0 and previous is None:
        previous, maxima = _from_earlier_record(storage, batch)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    mine = compute(batch, previous, maxima, delays, now)
    try:
        storage.write_bytes(clock_path(batch), mine.encode(), overwrite=False)
    except FileExistsError:
        winner = _read(storage, batch)
        if winner is None:  # pragma: no cover - a record is never deleted while its batch runs
            raise
        return winner
    _clean(storage, batch)
    return mine


def _clean(storage: CheckpointStorage, batch: int) -> None:
    """Delete the record and maxima of batch ``batch - RETAINED_BATCHES`` (each batch's creator
    deletes one old batch, so the cost per batch is constant)."""
    old = batch - RETAINED_BATCHES
    if old < 0:
        return
    try:
        stale = [f"{maxima_dir(old)}/{n}" for n in storage.list_dir(maxima_dir(old))]
        if storage.exists(clock_path(old)):
            stale.append(clock_path(old))
        storage.delete_many(stale)
    except Exception as exc:  # retention is best effort
        _LOG.warning("could not clean the clock record of batch %d: %s", old, exc)
