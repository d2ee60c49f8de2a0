"""The keyed function of tests/state_data (shipped to the Python workers by value): every keyed
state type (process_fns.AllStates) plus a processing-time timer per row, far in the future, so
that the state also holds timers that never fire while the test runs."""

from __future__ import annotations

from process_fns import AllStates

#: Timers are set at FAR + v: about 2096, never due in a test.
FAR_MS = 4_000_000_000_000


class AllStatesAndTimers(AllStates):
    def process_element(self, row, ctx):
        ctx.timer_service().register_processing_time_timer(FAR_MS + row.v)
        yield from super().process_element(row, ctx)

    def on_timer(self, timestamp, ctx):  # pragma: no cover - never due
        return ()
