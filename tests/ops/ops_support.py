"""Helpers of the ops tests: run an operator case at a partition count, compare outputs."""

from __future__ import annotations

from collections import Counter

import test_operator_equivalence as E
from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, RunResult, run_query

PARTITIONS_CONF = "spark.sql.shuffle.partitions"


def run(spark, case: E.Case, checkpoint, dirs, provider: str = SPARKSTATE_PROVIDER,
        partitions: int | None = None, **kwargs) -> RunResult:
    """Run ``case`` on ``checkpoint``; ``partitions`` only matters for a new checkpoint (Spark
    pins the count of an existing one in its offset log)."""
    confs = dict(case.extra_confs)
    if partitions is not None:
        confs[PARTITIONS_CONF] = str(partitions)
    return run_query(spark, case.build, provider_class=provider, input_dir=dirs, schema=[s() for s in case.schemas],
                     checkpoint_dir=str(checkpoint), output_mode=case.output_mode, extra_confs=confs, **kwargs)


def reference(spark, case: E.Case, tmp_path_factory, provider: str = HDFS_PROVIDER,
              cuts: tuple[int, ...] = ()) -> RunResult:
    """The run of ``case`` on ``provider`` (default Spark's HDFS provider), uninterrupted or stopped
    and restarted at ``cuts`` (see ``E.reference_run``), once per test session (shared with the
    operator equivalence tests)."""
    return E.reference_run(spark, case, tmp_path_factory, provider, cuts)


def assert_equal_to_uninterrupted(case: E.Case, runs: list[RunResult], want: RunResult, what: str,
                                  renumbered: bool = False) -> None:
    """Per batch, batch ids included, when ``want`` stopped where ``runs`` did (a reference with
    the same cuts) or the case's batch ids survive restarts; else as a multiset of rows (a run that
    ends with a watermark adds a no-data batch the uninterrupted run does not have).
    ``renumbered``: an in-place rescale inserted batches without input (as Spark's offline
    repartition does), so batches compare in order rather than by id."""
    merged: dict[int, list] = {}
    for r in runs:
        merged.update(r.batches)
    if case.restart_per_batch and renumbered:
        got = [rows for _, rows in sorted(merged.items())]
        assert got == [rows for _, rows in sorted(want.batches.items())], f"{what}: per-batch outputs differ"
    elif case.restart_per_batch or not renumbered:
        E.assert_same_batches(dict(sorted(merged.items())), want.batches, what)
    else:
        got = Counter(row for rows in merged.values() for row in rows)
        assert got == want.row_counts(), f"{what}: rows differ from the uninterrupted run"
