"""Where a call's time goes, without a profiler: wrap the functions that do the work and add up
their time per phase label.

A profile of the provider's worker (``bench/commit_profile.py``, ``bench/restore_profile.py``)
drives its service directly and wraps, by name, the functions each phase runs -- where their
callers look them up (a module attribute, a class attribute), so that the wrapped one is the one
called. Time spent in a wrapped function called from another wrapped one counts for both.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable, Optional


class PhaseTimes:
    """Seconds per phase label, summed over every call of the wrapped functions."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, owner, name: str, label: str, when: Optional[Callable[..., bool]] = None) -> None:
        """Replace ``owner.name`` by a wrapper that adds its time to ``label`` (only the calls for
        which ``when(*args, **kwargs)`` holds, when given)."""
        original = getattr(owner, name)
        seconds = self.seconds

        def timed(*args, **kwargs):
            if when is not None and not when(*args, **kwargs):
                return original(*args, **kwargs)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[label] += time.perf_counter() - started

        setattr(owner, name, timed)

    def clear(self) -> None:
        self.seconds.clear()
