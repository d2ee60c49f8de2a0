"""Move a checkpoint between Spark's state store providers and spark-state (placeholder)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class MigrateResult:
    checkpoint: str
    target: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def migrate(*args, **kwargs):
    raise NotImplementedError
