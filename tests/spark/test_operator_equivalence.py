"""Every built-in stateful operator gives the same output on a provider under test as on
Spark's HDFS provider, micro-batch by micro-batch.

Each case is a small stateful query over 5-6 deterministic micro-batches (one parquet file
per batch and source, ``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``; see
``streaming_harness``). The HDFS provider's run is the reference; it is computed once per case
and checked against what the case's data was designed to produce (state carried across
batches, late rows dropped, evictions and timeouts firing), so a provider that loses state
cannot match it by accident. Every provider in ``PROVIDERS_UNDER_TEST`` must then emit the same
rows in every batch and report the same number of state rows per operator and batch.

Further tests: restart from a checkpoint in the middle of the input (new provider instances
must restore the committed state), and a task that fails *after* the state store committed,
so the retried attempt re-commits an already committed version.

The cases live in ``operator_cases`` (one operator each, hand-made rows) and ``eviction_cases``
(many keys, eviction in rounds), both over ``case_model``; this module runs them and holds the runs' per-session cache
(:func:`reference_run`), which the ops tests share.

Providers under test are ids of ``streaming_harness``: a class, or ``<class>#<backend>`` for
spark-state's provider on one of its backends.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Iterator, Optional

import pytest

from case_model import Case, schema_kv
from eviction_cases import EVICTION_CASES
from operator_cases import SEMANTIC_CASES, build_agg
from streaming_harness import (
    HDFS_PROVIDER,
    ROCKSDB_PROVIDER,
    SPARKSTATE_HASHMAP,
    SPARKSTATE_PROVIDER,
    SPARKSTATE_SPILLING,
    RunResult,
    backends_default_on_every_line,
    merge_runs,
    run_query,
    ship_module_by_value,
    short_name,
    write_batches,
)

pytestmark = pytest.mark.spark

#: Compared against the HDFS provider: spark-state's on both backends. Spark's RocksDB provider
#: passes these tests too (it was the suite's first provider under test, to show that the cases
#: compare providers fairly); add ROCKSDB_PROVIDER here to run it again, e.g. after changing a
#: case. CI leaves it out: it tests Spark's code, not ours, and was a third of this module's time.
PROVIDERS_UNDER_TEST = [SPARKSTATE_PROVIDER, SPARKSTATE_HASHMAP]

REFERENCE_PROVIDER = HDFS_PROVIDER

# The functions mapInPandas runs (the task-retry test's) live in Python workers, which cannot
# import this module (tests/ is not on their path): pickle them by value.
ship_module_by_value(sys.modules[__name__])

#: The hand-made cases (each operator's semantics) and the many-key ones (eviction in rounds); the
#: ops tests run the former.
CASES = SEMANTIC_CASES + EVICTION_CASES
CASES_BY_NAME = {c.name: c for c in CASES}

RESTART_CASES = ["agg_update", "dedup", "join_inner", "apply_event_timeout", "session_window", "window_many",
                 "dedup_within_many"]


# ---------------------------------------------------------------------------------------------
# Running


def write_inputs(case: Case, root, upto: Optional[int] = None, start: int = 0) -> list:
    """Write batches ``[start, upto)`` of every source under ``root/in<i>``; return the dirs."""
    dirs = []
    for i, (schema, batches) in enumerate(zip(case.schemas, case.batches)):
        d = os.path.join(os.fspath(root), f"in{i}")
        end = len(batches) if upto is None else upto
        write_batches(d, batches[start:end], schema(), start=start)
        dirs.append(d)
    return dirs


def run_case(spark, case: Case, provider: str, dirs, checkpoint, **kwargs) -> RunResult:
    return run_query(
        spark,
        case.build,
        provider_class=provider,
        input_dir=dirs,
        schema=[s() for s in case.schemas],
        checkpoint_dir=checkpoint,
        output_mode=case.output_mode,
        extra_confs=case.extra_confs,
        **kwargs,
    )


#: Input files of each case, written once for the whole test session.
_INPUTS: dict[str, list] = {}


def inputs_of(case: Case, tmp_path_factory) -> list:
    """The input files of ``case``, shared by all providers' runs and the reference runs."""
    if case.name not in _INPUTS:
        _INPUTS[case.name] = write_inputs(case, tmp_path_factory.mktemp(f"in-{case.name}"))
    return _INPUTS[case.name]


@pytest.fixture(scope="module")
def case_inputs(tmp_path_factory):
    """Input files of each case, written once and shared by all providers' runs."""
    return lambda case: inputs_of(case, tmp_path_factory)


#: Runs of the cases, per (case, provider, cuts), for the whole test session: this module's tests
#: and the ops tests (``ops_support.reference``) compare with the same runs.
_REFERENCES: dict[tuple[str, str, tuple[int, ...]], RunResult] = {}


def reference_run(spark, case: Case, tmp_path_factory, provider: str = REFERENCE_PROVIDER,
                  cuts: tuple[int, ...] = ()) -> RunResult:
    """The run of ``case`` on ``provider`` over all its batches, computed once per test session,
    provider and ``cuts``.

    Without cuts the run is uninterrupted, and first checked against what the case's data was
    designed to produce. With ``cuts`` the input arrives in parts: the query runs over the batches
    before the first cut, stops, and is restarted on its checkpoint with the next part added, and
    so on -- the reference for a test that stops and restarts (or savepoints and restores) at the
    same batches. With a watermark its output may differ from the uninterrupted run's: a run that
    stops with the watermark ahead of its state ends with a no-data batch that evicts, which an
    uninterrupted run does when the next data arrives (dropDuplicatesWithinWatermark then even
    emits other rows). Compared with it, every row and its batch id must match.
    """
    cuts = tuple(cuts)
    key = (case.name, provider, cuts)
    if key not in _REFERENCES:
        tag = "-".join(map(str, cuts))
        root = tmp_path_factory.mktemp(f"ref-{case.name}{'-cut-' + tag if cuts else ''}")
        if not cuts:
            result = run_case(spark, case, provider, inputs_of(case, tmp_path_factory), root / "ckpt")
            case.check(case, result)
        else:
            bounds = [0, *cuts, case.num_batches]
            runs = [run_case(spark, case, provider, write_inputs(case, root, start=start, upto=end), root / "ckpt")
                    for start, end in zip(bounds, bounds[1:])]
            result = RunResult(provider, merge_runs(*runs), [p for r in runs for p in r.progress])
        _REFERENCES[key] = result
    return _REFERENCES[key]


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """The HDFS provider's uninterrupted run of a case (computed once, sanity-checked)."""
    return lambda case: reference_run(spark, case, tmp_path_factory)


def state_rows(result: RunResult) -> dict[int, list]:
    """numRowsTotal of each stateful operator, per batch."""
    return {
        p["batchId"]: [op["numRowsTotal"] for op in p.get("stateOperators") or []]
        for p in result.progress
        if "batchId" in p
    }


def assert_same_batches(got: dict, want: dict, what: str) -> None:
    if got == want:
        return
    lines = [f"{what}: per-batch outputs differ"]
    for b in sorted(set(got) | set(want)):
        if got.get(b) != want.get(b):
            lines.append(f"  batch {b}: got {got.get(b)!r}\n  {' ' * len(str(b))}      want {want.get(b)!r}")
    pytest.fail("\n".join(lines[:12]))


PROVIDER_IDS = [short_name(p) for p in PROVIDERS_UNDER_TEST]


# ---------------------------------------------------------------------------------------------
# Tests


def _match_params() -> list:
    """Every (case, provider) pair. The compatibility suite (mark ``lines``, run on every Spark line)
    takes :func:`_on_every_line`'s pairs; the newest line's full suite runs them all."""
    return [pytest.param(case, provider, id=f"{case.name}-{short_name(provider)}",
                         marks=[pytest.mark.lines] if _on_every_line(case, provider) else [])
            for case in CASES for provider in PROVIDERS_UNDER_TEST] + [
        # Pending writes that spill every few writes: the cases that evict in the middle of runs
        # (scans that write while they iterate) and the complete-mode aggregation (Spark 3.5 iterates
        # its store after the commit). The spill runs are the JVM's, the same for both backends; the
        # backends differ in how a commit that spilled reaches their views (rocksdb: a fresh export;
        # hashmap: the state reloaded), which the cases of SPILL_CASES_ON_BOTH show on hashmap too.
        pytest.param(case, provider, id=f"{case.name}-{short_name(provider)}")
        for case in EVICTION_CASES + [CASES_BY_NAME["agg_complete"]] for provider in SPARKSTATE_SPILLING
        if provider == SPARKSTATE_SPILLING[0] or case.name in SPILL_CASES_ON_BOTH]


#: The cases where a Spark line meets a backend's own path: complete mode (Spark 3.5 iterates its
#: store after the commit, which the hashmap view serves from the reloaded state) and session
#: windows (prefix scans, whose key layout Spark records per line).
LINE_CASES_ON_HASHMAP = frozenset({"agg_complete", "session_window"})
#: The many-key eviction cases every line runs: a join's four stores evicted by key and by value
#: condition, and session windows merged and evicted through prefix scans. The others call the
#: provider as their one-operator cases do, at more keys.
LINE_EVICTION_CASES = frozenset({"join_left_many", "session_many"})
#: One-operator cases whose many-key twin in :data:`LINE_EVICTION_CASES` runs on every line on
#: the default backend: the same operator, so the same calls of the provider (the newest line's
#: suite runs both).
LINE_TWINS = {"join_left_outer": "join_left_many", "session_window": "session_many"}


def _on_every_line(case: Case, provider: str) -> bool:
    """Whether the compatibility suite runs ``case`` on ``provider``. What a Spark line changes is
    how Spark calls the provider (the shim's per-line folders): the same calls for both backends,
    and for a case and its many-key twin. So on the default backend every one-operator case
    without a twin in :data:`LINE_TWINS` and the eviction cases of :data:`LINE_EVICTION_CASES`,
    and on ``hashmap`` the cases of :data:`LINE_CASES_ON_HASHMAP`; the backends' own code is
    common to every line."""
    if provider == SPARKSTATE_HASHMAP:
        return case.name in LINE_CASES_ON_HASHMAP
    if case in EVICTION_CASES:
        return case.name in LINE_EVICTION_CASES
    return case.name not in LINE_TWINS

#: The spilling cases also run on the hashmap backend: several stores per operator (a join),
#: session windows (scan and rewrite under a merge), complete mode (iteration after the commit).
SPILL_CASES_ON_BOTH = frozenset({"join_left_many", "session_many", "agg_complete"})


@pytest.mark.parametrize("case, provider", _match_params())
def test_operator_matches_hdfs(spark, case_inputs, reference, case, provider, tmp_path):
    want = reference(case)
    got = run_case(spark, case, provider, case_inputs(case), tmp_path / "ckpt")
    assert_same_batches(got.batches, want.batches, f"{case.name} on {short_name(provider)}")
    assert state_rows(got) == state_rows(want), "numRowsTotal per operator and batch differs"
    if provider in SPARKSTATE_SPILLING:
        spills = sum(op["customMetrics"].get("sparkStateSpills", 0)
                     for p in got.progress if "batchId" in p for op in p.get("stateOperators") or [])
        assert spills > 0, "the run was meant to spill pending writes to local disk"


@pytest.mark.parametrize("provider", PROVIDERS_UNDER_TEST, ids=PROVIDER_IDS)
@pytest.mark.parametrize("name", RESTART_CASES)
def test_restart_from_checkpoint(spark, tmp_path_factory, name, provider, tmp_path):
    """Run the first half of the batches, stop, add the rest, run again on the checkpoint
    (new run id: new provider instances that must load the committed state). Every batch, its id
    included, equals the HDFS provider's run stopped and restarted at the same batch."""
    case = CASES_BY_NAME[name]
    split = case.num_batches // 2
    want = reference_run(spark, case, tmp_path_factory, cuts=(split,))
    ckpt = tmp_path / "ckpt"
    dirs = write_inputs(case, tmp_path, upto=split)
    first = run_case(spark, case, provider, dirs, ckpt)
    write_inputs(case, tmp_path, start=split)
    second = run_case(spark, case, provider, dirs, ckpt)
    assert first.batch_ids and second.batch_ids and min(second.batch_ids) > max(first.batch_ids)
    assert first.run_id != second.run_id and first.query_id == second.query_id
    assert_same_batches(merge_runs(first, second), want.batches, f"{name} restarted on {short_name(provider)}")


@pytest.mark.parametrize("provider", backends_default_on_every_line(PROVIDER_IDS))
def test_restart_after_crash_between_batches(spark, case_inputs, reference, provider, tmp_path):
    """All input present; the first run dies after 2 batches, when batch 2's offsets are
    already logged; the second run re-plans batch 2 from the offset log."""
    case = CASES_BY_NAME["agg_update"]
    want = reference(case)
    ckpt = tmp_path / "ckpt"
    first = run_case(spark, case, provider, case_inputs(case), ckpt, stop_after_batches=2)
    assert first.stopped_early and first.batch_ids == [0, 1]
    second = run_case(spark, case, provider, case_inputs(case), ckpt)
    assert second.batch_ids[0] == 2
    assert_same_batches(merge_runs(first, second), want.batches, f"crash/restart on {short_name(provider)}")


def _version_files(part_dir: str, version: int) -> list:
    """Files under a state partition directory named ``<version>`` followed by ``.``, ``_``
    or ``-``: HDFS ``2.delta``, RocksDB ``2.zip`` / ``2.changelog`` / ``2_<uuid>.zip``,
    spark-state ``manifests/2.json`` and ``changelogs/2-<id>.arrow``."""
    import re

    pattern = re.compile(rf"{version}[._-]")
    found = []
    for dirpath, _, names in os.walk(part_dir):
        found += [os.path.relpath(os.path.join(dirpath, n), part_dir) for n in names if pattern.match(n)]
    return sorted(found)


#: Providers whose files show a committed version (see _version_files).
KNOWN_LAYOUT_PROVIDERS = (HDFS_PROVIDER, ROCKSDB_PROVIDER, SPARKSTATE_PROVIDER, SPARKSTATE_HASHMAP)


def fail_once_after_commit(marker_dir: str, state_dir: str, fail_batches: frozenset):
    """A mapInPandas function placed right after the aggregation (same task as
    StateStoreSaveExec). It first drains its input -- the JVM ends the input only after the
    save operator's iterator is exhausted, i.e. after the state store committed -- then, on
    the first attempt of each (batch in ``fail_batches``, partition), records which files of
    the committed version exist and raises. The retried attempt passes the rows through."""

    def fn(frames: Iterator) -> Iterator:
        from pyspark import TaskContext

        frames = list(frames)
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        part = ctx.partitionId()
        tag = f"b{batch}-p{part}"
        failed = os.path.join(marker_dir, tag + ".failed")
        if batch in fail_batches and ctx.attemptNumber() == 0 and not os.path.exists(failed):
            files = _version_files(os.path.join(state_dir, str(part)), batch + 1)
            with open(failed, "w") as out:
                json.dump({"attempt": ctx.attemptNumber(), "committed_files": files}, out)
            raise RuntimeError(f"injected failure after the state commit ({tag})")
        if ctx.attemptNumber() > 0:
            with open(os.path.join(marker_dir, f"{tag}.retried-{ctx.attemptNumber()}"), "w"):
                pass
        yield from frames

    return fn


@pytest.mark.parametrize("provider", [REFERENCE_PROVIDER] + PROVIDERS_UNDER_TEST,
                         ids=[short_name(p) for p in [REFERENCE_PROVIDER] + PROVIDERS_UNDER_TEST])
def test_task_retry_after_commit(spark, case_inputs, reference, provider, tmp_path):
    """In batches 0, 2 and 4 every task of the aggregation fails once after its state store
    committed version batchId+1; the retry reloads version batchId and commits batchId+1
    again, and the next batch loads the re-committed version. The output must equal the run
    without failures."""
    case = CASES_BY_NAME["agg_update"]
    want = reference(case)
    markers = tmp_path / "markers"
    markers.mkdir()
    ckpt = tmp_path / "ckpt"
    fail_batches = frozenset({0, 2, 4})
    fn = fail_once_after_commit(str(markers), str(ckpt / "state" / "0"), fail_batches)

    def build(df):
        return build_agg(df).mapInPandas(fn, "k string, n long, total long")

    got = run_query(
        spark,
        build,
        provider_class=provider,
        input_dir=case_inputs(case),
        schema=schema_kv(),
        checkpoint_dir=ckpt,
        output_mode="update",
    )
    assert_same_batches(got.batches, want.batches, f"task retry on {short_name(provider)}")

    failed = {p.name[: -len(".failed")]: json.loads(p.read_text()) for p in markers.glob("*.failed")}
    retried = {p.name.split(".retried")[0] for p in markers.glob("*.retried-*")}
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert len(failed) == len(fail_batches) * partitions, f"expected a failure per task, got {sorted(failed)}"
    assert set(failed) == retried, "every failed task must have been retried"
    if provider in KNOWN_LAYOUT_PROVIDERS:
        # the committed version's files existed when the first attempt failed
        not_committed = sorted(t for t, info in failed.items() if not info["committed_files"])
        assert not not_committed, f"failed before the state commit: {not_committed}"
