"""Keyed functions over two inputs (a full join, event time on both sides) and over a broadcast
input (rule patterns), and the outputs the time model (``model``) says each must emit.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_state.process import KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

from .model import ms_of

# --------------------------------------------------------------------- two-stream full join
JOIN_SCHEMA = StructType([StructField("id", StringType()), StructField("src", StringType()),
                          StructField("ts", LongType())])
JOIN_OUTPUT = "id string, left string, right string"


class FullJoin(KeyedCoProcessFunction):
    """Flink's TwoStreamFullJoinExample: each side buffered in list state; a new row joins
    with everything the other side buffered for its key."""

    def open(self, ctx):
        row_type = StructType([StructField("src", StringType()), StructField("ts", LongType())])
        self.lefts = ctx.get_list_state(ListStateDescriptor("left", row_type))
        self.rights = ctx.get_list_state(ListStateDescriptor("right", row_type))

    def process_element1(self, row, ctx):
        self.lefts.add((row.src, row.ts))
        for r in self.rights.get():
            yield (ctx.current_key, f"{row.src}@{row.ts}", f"{r[0]}@{r[1]}")

    def process_element2(self, row, ctx):
        self.rights.add((row.src, row.ts))
        for lft in self.lefts.get():
            yield (ctx.current_key, f"{lft[0]}@{lft[1]}", f"{row.src}@{row.ts}")


def expected_full_join(left_batches, right_batches) -> list:
    """All pairs per key (order-free: every pair is emitted exactly once, by whichever
    side arrived second)."""
    lefts, rights = defaultdict(list), defaultdict(list)
    for lb in left_batches:
        for k, s, t in lb:
            lefts[k].append(f"{s}@{t}")
    for rb in right_batches:
        for k, s, t in rb:
            rights[k].append(f"{s}@{t}")
    return sorted((k, a, b) for k in lefts for a in lefts[k] for b in rights.get(k, []))


# ------------------------------------------------------------------ broadcast rule patterns
ACTION_SCHEMA = StructType([StructField("user", StringType()), StructField("action", StringType()),
                            StructField("seq", LongType())])
RULE_SCHEMA = StructType([StructField("version", LongType()), StructField("first", StringType()),
                          StructField("second", StringType())])
PATTERN_OUTPUT = "user string, first string, second string, seq bigint, rule_version bigint"
PATTERNS = MapStateDescriptor("patterns", LongType(), RULE_SCHEMA)


class PatternEvaluator(KeyedBroadcastProcessFunction):
    """Flink's BroadcastStateExample: the rule stream sets the current pattern (the rule with
    the highest version wins, one state entry); a user's previous action and this one
    matching the pattern emit a match."""

    def open(self, ctx):
        self.prev = ctx.get_state(ValueStateDescriptor("last_action", StringType()))

    def process_broadcast_element(self, row, ctx):
        rules = ctx.get_broadcast_state(PATTERNS)
        current = rules.get(0)
        if current is None or row.version >= current[0]:
            rules.put(0, (row.version, row.first, row.second))
        return ()

    def process_element(self, row, ctx):
        rule = ctx.get_broadcast_state(PATTERNS).get(0)
        prev = self.prev.value()
        if rule is not None and prev is not None and (prev, row.action) == (rule[1], rule[2]):
            yield (ctx.current_key, rule[1], rule[2], row.seq, rule[0])
        self.prev.update(row.action)


def expected_patterns(action_batches, rule_batches) -> dict[int, list]:
    rule: Optional[tuple] = None
    prev: dict[str, str] = {}
    out: dict[int, list] = {}
    for b, (actions, rules) in enumerate(zip(action_batches, rule_batches)):
        for r in sorted(rules, key=lambda r: r[0]):
            if rule is None or r[0] >= rule[0]:
                rule = tuple(r)
        emitted = []
        for user, action, seq in sorted(actions, key=lambda a: a[2]):
            p = prev.get(user)
            if rule is not None and p is not None and (p, action) == (rule[1], rule[2]):
                emitted.append((user, rule[1], rule[2], seq, rule[0]))
            prev[user] = action
        out[b] = sorted(emitted)
    return out


# ---------------------------------------------------------------- two inputs with event time
CO_EVENTS_SCHEMA = StructType([StructField("id", StringType()), StructField("ts", TimestampType())])
CO_TIMER_OUTPUT = "id string, at bigint, lefts bigint, rights bigint, watermark bigint"


class CoCounts(KeyedCoProcessFunction):
    """Counts each key's rows per side; every row registers an event-time timer 5 s after
    it, which reports the key's counts (both sides share the key's state and timers)."""

    def open(self, ctx):
        self.lefts = ctx.get_state(ValueStateDescriptor("lefts", LongType()))
        self.rights = ctx.get_state(ValueStateDescriptor("rights", LongType()))

    def _row(self, state, ctx):
        state.update((state.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5000)
        return ()

    def process_element1(self, row, ctx):
        return self._row(self.lefts, ctx)

    def process_element2(self, row, ctx):
        return self._row(self.rights, ctx)

    def on_timer(self, timestamp, ctx):
        yield (ctx.current_key, timestamp, self.lefts.value() or 0, self.rights.value() or 0,
               ctx.timer_service().current_watermark())


def expected_co_counts(left_batches, right_batches, left_delay: int, right_delay: int) -> dict[int, list]:
    """Watermark: min over the sides that have seen rows of (max event time - delay), never
    backwards, 0 at first; a row is late (dropped) if its time <= the batch's watermark."""
    w, max_l, max_r = 0, None, None
    counts: dict[str, list] = defaultdict(lambda: [0, 0])
    timers: set = set()
    out: dict[int, list] = {}
    inputs = list(zip(left_batches, right_batches))
    b = 0
    while b < len(inputs) + 1:
        cands = [m - d for m, d in ((max_l, left_delay), (max_r, right_delay)) if m is not None]
        next_w = max(w, min(cands)) if cands else w
        if b == len(inputs):  # the batch without input: runs if a timer is due at a higher watermark
            if not (next_w > w and any(t <= next_w for _, t in timers)):
                break
            inputs.append(([], []))
        lrows, rrows = inputs[b]
        w = next_w
        emitted = []
        for t, k in sorted((t, k) for k, t in timers if t <= w):
            timers.discard((k, t))
            emitted.append((k, t, counts[k][0], counts[k][1], w))
        for side, rows in ((0, lrows), (1, rrows)):
            for k, ts in rows:
                t = ms_of(ts)
                if t <= w:
                    continue
                counts[k][side] += 1
                timers.add((k, t + 5000))
        for _k, ts in lrows:
            max_l = ms_of(ts) if max_l is None else max(max_l, ms_of(ts))
        for _k, ts in rrows:
            max_r = ms_of(ts) if max_r is None else max(max_r, ms_of(ts))
        out[b] = sorted(emitted)
        b += 1
    return out
