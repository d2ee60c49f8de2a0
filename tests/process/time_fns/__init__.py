"""Keyed functions with time (timers, event time, two inputs, broadcast rules), run in Spark's
Python workers, and plain-Python models of what each must emit.

``model`` replays the documented time model (event times, the watermark of each batch),
``one_input`` holds the functions on one input and ``two_inputs`` those on two inputs or a
broadcast input. Tests import every name from this package (``import time_fns``, ``from time_fns
import ...``) and ship it by value (``ship_module_by_value(time_fns)``): cloudpickle pickles the
functions of a registered package's submodules by value too, so Python workers, which do not
have ``tests/`` on their path, never import it.
"""

from .model import EPOCH, EPOCH_MS, EVENTS_SCHEMA, at, flatten, model_batches, ms_of, rows_by_batch, watermarks
from .one_input import (
    BUFFER_OUTPUT,
    LATE_OUTPUT,
    PV_OUTPUT,
    SESSION_OUTPUT,
    WINDOW_OUTPUT,
    BufferingCounter,
    FailingPageViews,
    FakeWindow,
    InactivityAlert,
    PageViews,
    ProcessingTimeReminder,
    RegistersEventTimer,
    ReportLateness,
    expected_inactivity,
    expected_lateness,
    expected_page_views,
    expected_windows,
)
from .two_inputs import (
    ACTION_SCHEMA,
    CO_EVENTS_SCHEMA,
    CO_TIMER_OUTPUT,
    JOIN_OUTPUT,
    JOIN_SCHEMA,
    PATTERN_OUTPUT,
    PATTERNS,
    RULE_SCHEMA,
    CoCounts,
    FullJoin,
    PatternEvaluator,
    expected_co_counts,
    expected_full_join,
    expected_patterns,
)

__all__ = [
    "EPOCH", "EPOCH_MS", "EVENTS_SCHEMA", "at", "flatten", "model_batches", "ms_of", "rows_by_batch", "watermarks",
    "BUFFER_OUTPUT", "LATE_OUTPUT", "PV_OUTPUT", "SESSION_OUTPUT", "WINDOW_OUTPUT", "BufferingCounter",
    "FailingPageViews", "FakeWindow", "InactivityAlert", "PageViews", "ProcessingTimeReminder", "RegistersEventTimer",
    "ReportLateness", "expected_inactivity", "expected_lateness", "expected_page_views", "expected_windows",
    "ACTION_SCHEMA", "CO_EVENTS_SCHEMA", "CO_TIMER_OUTPUT", "JOIN_OUTPUT", "JOIN_SCHEMA", "PATTERN_OUTPUT", "PATTERNS",
    "RULE_SCHEMA", "CoCounts", "FullJoin", "PatternEvaluator", "expected_co_counts", "expected_full_join",
    "expected_patterns",
]
