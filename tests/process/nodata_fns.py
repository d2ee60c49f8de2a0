"""Functions and input of tests/process/test_no_data_batches.py (shipped to the Python workers
by value), with the plain-Python model of what they and Spark's own windowed count emit.

The input is written by hand (seconds of event time after :data:`time_fns.EPOCH`) so that both
late-row rules agree on every row: spark-state drops rows whose event time is ``<=`` the
batch's watermark; Spark's aggregation drops rows whose *window end* is ``<=`` a watermark
(of the batch, or of the batch before for late rows, by line). Every on-time row here is
above its batch's watermark, every late row's window ended at or before the previous batch's
watermark, so both count exactly the on-time rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_state.process import CheckpointedFunction, KeyedProcessFunction
from spark_state.state import ListStateDescriptor, MapStateDescriptor
from time_fns import EPOCH_MS, at

SCHEMA = StructType([StructField("key", StringType()), StructField("ts", TimestampType())])
WINDOW_OUTPUT = "key string, window_start bigint, window_end bigint, count bigint"
SIZE_MS = 10_000
DELAY_MS = 5_000

#: (key, event second, late?) per input file; files are grouped into availableNow runs by RUNS.
FILES: list[list[tuple[str, int, bool]]] = [
    # run 1 -- watermarks 0, 7, 17; the batch after closes [10, 20) at 22
    [("a", 1, False), ("b", 3, False), ("a", 8, False), ("c", 12, False)],
    [("a", 9, False), ("b", 14, False), ("c", 18, False), ("a", 22, False)],
    [("b", 19, False), ("c", 25, False), ("a", 27, False)],
    # run 2 -- watermarks 22, 24, 31; the last file moves the watermark to 33, which closes no window
    [("a", 23, False), ("c", 29, False), ("a", 5, True)],
    [("b", 31, False), ("b", 26, False), ("c", 36, False), ("c", 15, True)],
    [("a", 33, False), ("a", 38, False), ("b", 12, True)],
    # run 3 -- watermarks 33, 36; the batch after closes [30, 40) at 42; [40, 50) stays open
    [("b", 34, False), ("c", 41, False), ("a", 15, True)],
    [("c", 44, False), ("a", 39, False), ("b", 47, False)],
]
#: files per availableNow run
RUNS = [3, 3, 2]


def file_rows(i: int) -> list[tuple]:
    return [(k, at(s * 1000)) for k, s, _ in FILES[i]]


class WindowCount(KeyedProcessFunction):
    """Spark's ``groupBy(window(ts, size), key).count()`` in append mode as a keyed function: a
    count per window start in map state and an event-time timer at the window's end (Spark
    emits a window when its end is ``<=`` the watermark; a timer at ``t`` fires when ``t <=``
    the watermark: the same rule)."""

    def __init__(self, size_ms: int) -> None:
        self.size = size_ms

    def open(self, ctx):
        self.counts = ctx.get_map_state(MapStateDescriptor("counts", LongType(), LongType()))

    def process_element(self, row, ctx):
        start = ctx.timestamp() // self.size * self.size
        ctx.timer_service().register_event_time_timer(start + self.size)
        self.counts.put(start, (self.counts.get(start) or 0) + 1)
        return ()

    def on_timer(self, timestamp, ctx):
        start = timestamp - self.size
        yield (ctx.current_key, start, timestamp, self.counts.get(start))
        self.counts.remove(start)


class CountOnly(KeyedProcessFunction):
    """No timers: emits a running count per key with every row."""

    def open(self, ctx):
        self.counts = ctx.get_map_state(MapStateDescriptor("n", StringType(), LongType()))

    def process_element(self, row, ctx):
        n = (self.counts.get("n") or 0) + 1
        self.counts.put("n", n)
        yield (ctx.current_key, 0, 0, n)


class Collect(CheckpointedFunction):
    """Operator state: every row's event second appended to a list (split mode)."""

    def initialize_state(self, ctx):
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", LongType()))

    def process_element(self, row, ctx):
        self.seen.add(1)
        yield (row.key, 0, 0, len(self.seen.get()))


class BatchModel:
    """One batch of the model: its watermark, the input file it read (None: a batch without
    input), what it emitted, and the state after it."""

    def __init__(self, file: Optional[int], watermark_ms: int, emitted: list, late: int, open_windows: int):
        self.file, self.watermark_ms, self.emitted, self.late, self.open_windows = \
            file, watermark_ms, emitted, late, open_windows


def model(spark_rule: bool, runs: list[int] = RUNS) -> list[list[BatchModel]]:
    """The batches of each availableNow run (files ``maxFilesPerTrigger=1``): each file a batch,
    then after the run's last file one batch without input when the watermark moves
    (``spark_rule``: Spark's own operators) or when a window's timer is due at the moved
    watermark (spark-state). Times are epoch ms; windows are (key, start, end, count)."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    w, max_ev = 0, None
    w_before = 0  # the watermark of the input batch before (Spark's late-row rule may use it)
    out: list[list[BatchModel]] = []
    f = 0

    def batch(file: Optional[int]) -> BatchModel:
        nonlocal max_ev
        due = sorted(k for k in counts if k[1] + SIZE_MS <= w)
        emitted = [(key, start, start + SIZE_MS, counts.pop((key, start))) for key, start in due]
        late = 0
        for key, s, is_late in FILES[file] if file is not None else []:
            t = EPOCH_MS + s * 1000
            if t <= w:
                assert is_late and t // SIZE_MS * SIZE_MS + SIZE_MS <= w_before, (file, key, s)
                late += 1
                continue
            assert not is_late, (file, key, s)
            counts[(key, t // SIZE_MS * SIZE_MS)] += 1
            max_ev = t if max_ev is None else max(max_ev, t)
        return BatchModel(file, w, emitted, late, len(counts))

    def advance() -> None:
        nonlocal w, w_before
        w_before, w = w, max(w, max_ev - DELAY_MS)

    for n in runs:
        run = []
        for _ in range(n):
            run.append(batch(f))
            f += 1
            advance()
        last = run[-1].watermark_ms
        if w > last and (spark_rule or any(start + SIZE_MS <= w for _, start in counts)):
            run.append(batch(None))
        out.append(run)
    return out
