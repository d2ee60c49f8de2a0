"""Spark's own log entries in a streaming checkpoint: the offset log and the commit log.

The one codec of both files, for the runtime (a keyed function takes its batch's time from the
offset log, :mod:`spark_state.process.spark_time`) and the tools (:mod:`spark_state.ops`,
:mod:`spark_state.state_data`), which read and write them. Pure: bytes in, values out.

Byte layouts (Spark's log version 1; lines separated by ``\\n``)::

    offsets/<b>   v1
                  {"batchWatermarkMs": W, "batchTimestampMs": T, "conf": {...}}
                  <one line per source: its end offset of batch b, or "-">
    commits/<b>   v1
                  {"nextBatchWatermarkMs": W'}

``W`` is the watermark batch ``b`` runs with, ``T`` its timestamp (``current_timestamp()``);
``W'`` the watermark of batch ``b + 1``, known once ``b`` is committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import CheckpointCorruptError


@dataclass(frozen=True)
class OffsetEntry:
    """One ``offsets/<b>`` file: the version line, the metadata and the per-source lines."""

    batch_id: int
    version_line: str
    metadata: dict
    source_lines: tuple[str, ...]

    @property
    def conf(self) -> dict[str, str]:
        return dict(self.metadata.get("conf") or {})

    @property
    def watermark_ms(self) -> int:
        """The watermark of the batch (``batchWatermarkMs``; 0 when the entry has none)."""
        return int(self.metadata.get("batchWatermarkMs", 0))

    @property
    def timestamp_ms(self) -> int:
        """The batch's timestamp (``batchTimestampMs``; 0 when the entry has none)."""
        return int(self.metadata.get("batchTimestampMs", 0))

    def with_conf(self, **changes: str) -> "OffsetEntry":
        metadata = json.loads(json.dumps(self.metadata))
        metadata.setdefault("conf", {}).update(changes)
        return OffsetEntry(self.batch_id, self.version_line, metadata, self.source_lines)

    def encode(self) -> bytes:
        lines = [self.version_line, json.dumps(self.metadata, separators=(",", ":")), *self.source_lines]
        return "\n".join(lines).encode("utf-8")

    @classmethod
    def decode(cls, batch_id: int, data: bytes, where: str) -> "OffsetEntry":
        """:raises CheckpointCorruptError: not a version line and a JSON metadata line."""
        lines = data.decode("utf-8").split("\n")
        if len(lines) < 2 or not lines[0].startswith("v"):
            raise CheckpointCorruptError(where, "not a Spark offset log entry (expected 'v1' and a metadata line)")
        try:
            metadata = json.loads(lines[1]) if lines[1].strip() else {}
        except json.JSONDecodeError as exc:
            raise CheckpointCorruptError(where, f"the metadata line is not JSON ({exc})") from None
        if not isinstance(metadata, dict):
            raise CheckpointCorruptError(where, "the metadata line is not a JSON object")
        return cls(batch_id, lines[0], metadata, tuple(lines[2:]))


def next_batch_watermark(commit: bytes) -> int:
    """The ``nextBatchWatermarkMs`` of a commit log entry (0 when it has none)."""
    lines = commit.decode("utf-8").split("\n")
    try:
        return int(json.loads(lines[1]).get("nextBatchWatermarkMs", 0)) if len(lines) > 1 else 0
    except (ValueError, AttributeError):
        return 0
