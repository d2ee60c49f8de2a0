"""Progress bars for long operations: tqdm on stderr, only when stderr is a terminal.

Scripts get clean output (``--json`` on stdout, nothing on stderr unless an error); people
at a terminal see what a savepoint, restore, rescale or migrate is doing.
"""

from __future__ import annotations

import sys
from typing import Optional


class Progress:
    """A counter with an optional tqdm bar (``enabled=False`` or no terminal: no output)."""

    def __init__(self, description: str, unit: str = "rows", total: Optional[int] = None, enabled: bool = True) -> None:
        self.count = 0
        self._bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is a dependency; an environment without it just has no bar
                return
            self._bar = tqdm(desc=description, unit=unit, total=total, unit_scale=True, file=sys.stderr,
                             dynamic_ncols=True, leave=False)

    def update(self, n: int) -> None:
        self.count += n
        if self._bar is not None:
            self._bar.update(n)

    def set_description(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
