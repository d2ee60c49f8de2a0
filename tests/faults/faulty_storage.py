"""A :class:`CheckpointStorage` wrapper that fails chosen calls, for deterministic engine tests.

It wraps a real storage (local disk in these tests) and, for calls matching a rule, raises
the rule's exception *before* the call (the write never happened) or *after* it (the write
happened, but the caller is told it failed: the ambiguous case). Everything else is passed
through, so the engine runs on real files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from spark_state.storage import CheckpointStorage


@dataclass
class Rule:
    method: str                     # "write_bytes", "upload_file", "read_bytes", ...
    path: str                       # regex searched in the storage-relative path
    error: Callable[[str], BaseException]
    nth: int = 1                    # fail the nth matching call (1-based) ...
    times: int = 1                  # ... and this many after it
    after: bool = False             # raise after the call went through
    seen: int = 0
    fired: int = 0


class FaultyStorage(CheckpointStorage):
    def __init__(self, inner: CheckpointStorage) -> None:
        self.inner = inner
        self.url = inner.url
        self.rules: list[Rule] = []

    def fail(self, method: str, path: str, error: Callable[[str], BaseException], **kwargs) -> Rule:
        rule = Rule(method, path, error, **kwargs)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules = []

    def _call(self, method: str, path: str, fn: Callable, *args, **kwargs):
        hit: Optional[Rule] = None
        for rule in self.rules:
            if rule.method == method and re.search(rule.path, path):
                rule.seen += 1
                if rule.nth <= rule.seen < rule.nth + rule.times:
                    hit = rule
                    break
        if hit is not None and not hit.after:
            hit.fired += 1
            raise hit.error(self.inner.full_url(path))
        result = fn(*args, **kwargs)
        if hit is not None:
            hit.fired += 1
            raise hit.error(self.inner.full_url(path))
        return result

    def read_bytes(self, path: str) -> bytes:
        return self._call("read_bytes", path, self.inner.read_bytes, path)

    def download_file(self, path: str, local_path: str) -> None:
        return self._call("download_file", path, self.inner.download_file, path, local_path)

    def exists(self, path: str) -> bool:
        return self._call("exists", path, self.inner.exists, path)

    def size(self, path: str) -> int:
        return self._call("size", path, self.inner.size, path)

    def list_dir(self, path: str = "") -> list[str]:
        return self._call("list_dir", path, self.inner.list_dir, path)

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = True) -> None:
        return self._call("write_bytes", path, self.inner.write_bytes, path, data, overwrite=overwrite)

    def upload_file(self, local_path: str, path: str) -> None:
        return self._call("upload_file", path, self.inner.upload_file, local_path, path)

    def delete(self, path: str) -> None:
        return self._call("delete", path, self.inner.delete, path)

    def delete_many(self, paths: Iterable[str]) -> None:
        paths = list(paths)
        return self._call("delete_many", ",".join(paths), self.inner.delete_many, paths)

    def child(self, subpath: str) -> "FaultyStorage":
        child = FaultyStorage(self.inner.child(subpath))
        child.rules = self.rules
        return child

    def full_url(self, path: str) -> str:
        return self.inner.full_url(path)
