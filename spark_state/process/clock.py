"""The time of a micro-batch: its watermark and processing time, global and deterministic.

Every task of batch ``B`` must see the same watermark and processing time, and so must a
retry of the task, a speculative twin, or a re-run of the batch after a restart (at any
parallelism). The time of a batch is Spark's: the watermark and timestamp Spark wrote for batch
``B`` in the query's offset log (:mod:`.spark_time`), read once per batch and kept in the
batch's clock record. Only where the tasks cannot read the offset log (and in runs that are not
a streaming batch: a bootstrap) is it computed here, the way Spark computes its watermark
(``max event time seen - delay``, never backwards, min over inputs), from the rows the function
saw:

* **Event-time maxima.** A task of batch ``B`` whose input declares event time records the
  largest event time of its rows (late ones included, as Spark does) as an empty file whose
  *name* carries the value, before its state commit::

      time/watermarks/<B>/<side>.<parallelism>.<partition>.<max event ms>

  Max is idempotent: retries, speculative twins, abandoned attempts and re-runs at another
  parallelism see the same rows of batch ``B`` (Spark's offset log fixes them), so extra files
  cannot change the maximum. Batch ``B + 1`` starts only after every task of ``B`` succeeded,
  so the directory is complete when it is read. They are written with Spark's time too: the
  function's observation reports them, and a savepoint carries them.
* **The clock record** of batch ``B`` is created by the first task of the batch that needs it,
  with create-if-absent; every other task (and every later attempt) reads that record, so the
  first writer decides::

      time/clock/<B>.json  {"format": 1, "batch": B, "watermark_ms": W, "processing_time_ms": T,
                            "max_event_ms": {"<side>": M, ...}, "source": "spark" | "computed"}

  ``max_event_ms`` is the maximum event time per input side over batches ``0..B-1``: the
  record of ``B - 1`` plus the files of ``B - 1``. The *computed* rule is
  ``W = max(W(B-1), min over sides that saw rows of (M(side) - delay(side)))``, 0 before any
  event time was seen (Spark's first watermark), and ``T`` the wall clock of the writer, never
  below ``T(B-1)``. With ``source`` ``spark``, ``W = max(W(B-1), batchWatermarkMs(B))`` and
  ``T = max(T(B-1), batchTimestampMs(B))``; the first batch on Spark's time after computed
  records (or none) also takes the computed rule into the maximum, so the watermark never goes
  backwards and a history Spark never saw (a bootstrapped savepoint's maxima, carried as batch
  0's) counts. A record without ``source`` is ``computed``.
* **Retention.** The task that creates record ``B`` deletes the record and the maxima
  (files and directory) of batch ``B - RETAINED_BATCHES`` (only ``B - 1`` is ever read).

Event times are epoch milliseconds. A record of ``B - 1`` may be missing (the batch ran with
a release or a function that used no time): the maxima then start again from batch ``B - 1``'s
files and the computed watermark from 0.
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
from .spark_time import SparkBatchTime, SparkOffsetLog

_LOG = logging.getLogger(__name__)

CLOCK_DIR = TIME_CLOCK_DIR
MAXIMA_DIR = TIME_MAXIMA_DIR
FORMAT = 1
#: Where a record's watermark and processing time come from (the ``source`` field).
SPARK, COMPUTED = "spark", "computed"
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
    #: :data:`SPARK` (Spark's time of the batch) or :data:`COMPUTED` (from the rows seen)
    source: str = COMPUTED

    def encode(self) -> bytes:
        return json.dumps({"format": FORMAT, "batch": self.batch, "watermark_ms": self.watermark_ms,
                           "processing_time_ms": self.processing_time_ms,
                           "max_event_ms": dict(self.max_event_ms), "source": self.source}, sort_keys=True).encode()

    @staticmethod
    def decode(raw: bytes) -> "BatchTime":
        d = json.loads(raw)
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown batch clock format {d.get('format')!r}")
        return BatchTime(int(d["batch"]), int(d["watermark_ms"]), int(d["processing_time_ms"]),
                         {str(k): int(v) for k, v in d.get("max_event_ms", {}).items()}, str(d.get("source", COMPUTED)))


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
            delays: Mapping[str, int], now_ms: int, spark: Optional[SparkBatchTime] = None) -> BatchTime:
    """Batch ``batch``'s time from the previous record, the previous batch's maxima and, where
    the offset log was read, Spark's time of the batch (pure; the rules are in the module
    docstring). Neither the watermark nor the processing time is ever below the previous
    record's."""
    max_event = dict(previous.max_event_ms) if previous else {}
    for side, value in maxima.items():
        if side not in max_event or value > max_event[side]:
            max_event[side] = value
    watermark = previous.watermark_ms if previous else INITIAL_WATERMARK
    candidates = [max_event[s] - d for s, d in delays.items() if s in max_event]
    if candidates and (spark is None or previous is None or previous.source != SPARK):
        watermark = max(watermark, min(candidates))
    if spark is not None:
        processing = max(spark.timestamp_ms, previous.processing_time_ms) if previous else spark.timestamp_ms
        return BatchTime(batch, max(watermark, spark.watermark_ms), processing, max_event, SPARK)
    processing = max(now_ms, previous.processing_time_ms) if previous else now_ms
    return BatchTime(batch, watermark, processing, max_event)


def resolve(storage: CheckpointStorage, batch: int, delays: Mapping[str, int],
            now_ms: Optional[int] = None, spark: Optional[SparkOffsetLog] = None) -> BatchTime:
    """The time of ``batch``: its record if one exists, else Spark's time of the batch from
    ``spark``'s offset log (or computed where it cannot be read), recorded with
    create-if-absent (if another task won the race, its record). ``delays`` maps each input side
    with event time to its watermark delay.

    :raises BatchTimeMismatchError: ``spark``'s checkpoint has no offset log entry of ``batch``.
    """
    found = _read(storage, batch)
    if found is not None:
        return found
    spark_time = spark.batch_time(batch) if spark is not None else None
    previous = _read(storage, batch - 1) if batch > 0 else None
    maxima = batch_maxima(storage, batch - 1) if batch > 0 else {}
    if batch > 0 and previous is None:
        previous, maxima = _from_earlier_record(storage, batch)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    mine = compute(batch, previous, maxima, delays, now, spark_time)
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
    """Delete the record and maxima of batch ``batch - RETAINED_BATCHES``, the maxima's
    directory included (each batch's creator deletes one old batch, so the cost per batch is
    constant)."""
    old = batch - RETAINED_BATCHES
    if old < 0:
        return
    try:
        stale = [f"{maxima_dir(old)}/{n}" for n in storage.list_dir(maxima_dir(old))]
        if storage.exists(clock_path(old)):
            stale.append(clock_path(old))
        storage.delete_many(stale)
        storage.delete_empty_dir(maxima_dir(old))
    except Exception as exc:  # retention is best effort
        _LOG.warning("could not clean the clock record of batch %d: %s", old, exc)
