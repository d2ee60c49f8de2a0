"""Task side: Spark's own time of a micro-batch, read from the query's offset log.

Before Spark runs batch ``B`` it writes ``<checkpoint>/offsets/<B>`` (layout in
:mod:`spark_state.spark.logs`), whose metadata holds the batch's watermark
(``batchWatermarkMs``: what Spark's own stateful operators of the query evict and drop late rows
by) and its timestamp (``batchTimestampMs``: ``current_timestamp()`` of the batch). A re-run of
``B`` after a restart reads the same entry, so both are fixed once per batch. Every task of a
keyed function knows the checkpoint root (the tick source puts it in the task's local
properties, :mod:`.ticks`), so the first task of a batch reads the entry once and the batch's
clock record (:mod:`.clock`) takes the batch's time from it: the function's watermark and
processing time are Spark's, whatever Spark's watermark follows (a filter after
``withWatermark``, several watermarks in one query, ``multipleWatermarkPolicy``).

Besides Spark's time, two outcomes:

* **Not readable here** (executors that cannot reach the checkpoint, no storage options for
  it): None, and one log line per checkpoint and process, which then does not try again; the
  clock computes the time from the rows the function saw, as :mod:`.clock` documents.
* **A batch Spark did not run**: the checkpoint is readable (its ``metadata`` file is there)
  but ``offsets/<B>`` is not, although Spark writes it before batch ``B`` starts and keeps it
  long after. The task's batch id and Spark's log disagree: :class:`~.errors.BatchTimeMismatchError`
  names both instead of letting the function run on a time of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping, Optional

from ..errors import CheckpointFileMissingError, SparkStateError
from ..spark.logs import OffsetEntry
from ..storage import CheckpointStorage
from .errors import BatchTimeMismatchError
from .location import storage_for

_LOG = logging.getLogger(__name__)
#: Checkpoint roots whose offset log could not be read (logged once per root and process).
_unreadable: set[str] = set()


@dataclass(frozen=True)
class SparkBatchTime:
    """Spark's watermark and timestamp of one batch (epoch milliseconds)."""

    watermark_ms: int
    timestamp_ms: int


@dataclass(frozen=True)
class SparkOffsetLog:
    """The offset log of the query a task runs in: ``checkpoint_root`` as Spark resolved it (a
    URI), read with the state location's storage options."""

    checkpoint_root: str
    storage_options: Mapping[str, str]

    def batch_time(self, batch: int) -> Optional[SparkBatchTime]:
        """Spark's time of ``batch``, or None when the offset log cannot be read here.

        :raises BatchTimeMismatchError: the checkpoint is readable but has no ``offsets/<batch>``.
        """
        if self.checkpoint_root in _unreadable:
            return None  # not tried again in this process: a storage that failed may take its timeout again
        path = f"offsets/{batch}"
        try:
            storage = storage_for(self.checkpoint_root, self.storage_options)
        except SparkStateError as exc:
            return self._not_readable(str(exc))
        try:
            raw = storage.read_bytes(path)
        except (CheckpointFileMissingError, FileNotFoundError):
            if _exists(storage, "metadata"):
                raise BatchTimeMismatchError(
                    f"this task runs batch {batch} (Spark's task property streaming.sql.batchId), but the query's "
                    f"offset log has no entry for it: {storage.full_url(path)} is missing, although Spark writes it "
                    "before the batch runs. The function does not run on a time Spark does not know; was the "
                    "checkpoint's offsets/ directory edited or purged while the query ran?") from None
            return self._not_readable(f"neither {path} nor the checkpoint's 'metadata' file is there")
        except (SparkStateError, OSError) as exc:
            return self._not_readable(str(exc))
        entry = OffsetEntry.decode(batch, raw, storage.full_url(path))
        if "batchWatermarkMs" not in entry.metadata or "batchTimestampMs" not in entry.metadata:
            return self._not_readable(f"{storage.full_url(path)} has no batchWatermarkMs or batchTimestampMs")
        return SparkBatchTime(entry.watermark_ms, entry.timestamp_ms)

    def _not_readable(self, why: str) -> Optional[SparkBatchTime]:
        """None (no Spark time here), logged once per checkpoint and process."""
        if self.checkpoint_root not in _unreadable:
            _unreadable.add(self.checkpoint_root)
            _LOG.warning("spark-state: the query's offset log under %s cannot be read here (%s): keyed functions "
                         "compute each batch's watermark and processing time from the rows they see instead of "
                         "taking Spark's", self.checkpoint_root, why)
        return None


def _exists(storage: CheckpointStorage, path: str) -> bool:
    try:
        return storage.exists(path)
    except (SparkStateError, OSError):
        return False
