"""Keyed functions run batches without input like Spark's own stateful operators: an event-time
window count written with keyed_process against Spark's ``groupBy(window, key).count()`` in
append mode, over several availableNow runs and under a processing-time trigger with an idle
source; no batch when nothing is due; the function's figures in the query progress; a restart
without new data. Input and model: tests/process/nodata_fns.py."""

from __future__ import annotations

import json
import threading
import time

import pytest
from pyspark.sql import functions as F

import nodata_fns
import time_fns
from nodata_fns import DELAY_MS, RUNS, SCHEMA, SIZE_MS, WINDOW_OUTPUT, WindowCount, file_rows
from spark_state.process import checkpointed_process, keyed_process
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, sql_tab, write_batches

pytestmark = pytest.mark.spark

PARALLELISM = 2
NAME = "WindowCount"
CONFS = {"spark.sql.shuffle.partitions": PARALLELISM}


def _keyed(df):
    return keyed_process(df.withWatermark("ts", f"{DELAY_MS} milliseconds"), "key", WindowCount(SIZE_MS),
                         WINDOW_OUTPUT, parallelism=PARALLELISM)


def _spark(df):
    counts = df.withWatermark("ts", f"{DELAY_MS} milliseconds").groupBy(F.window("ts", f"{SIZE_MS} milliseconds"),
                                                                        "key").count()
    return counts.select("key", F.unix_millis("window.start"), F.unix_millis("window.end"), "count")


def _ship():
    ship_module_by_value(time_fns)
    ship_module_by_value(nodata_fns)


def _rows(batches) -> set:
    return {r for rows in batches.values() for r in rows}


def _observations(progress, name=NAME) -> dict[int, dict]:
    """batch id -> the function's observation in that batch's progress report."""
    return {p["batchId"]: p["observedMetrics"]["spark_state." + name]["figures"] for p in progress
            if name and "spark_state." + name in (p.get("observedMetrics") or {})}


@pytest.fixture(scope="module")
def window_runs(spark, tmp_path_factory):
    """Both queries over the same files in len(RUNS) availableNow runs (each adding its files),
    then one more run without new files: ``{"keyed": [RunResult per run], "spark": [...]}``."""
    _ship()
    tmp = tmp_path_factory.mktemp("windows")
    results: dict[str, list] = {"keyed": [], "spark": [], "root": tmp}
    written = 0
    for n in RUNS + [0]:
        write_batches(tmp / "in", [file_rows(i) for i in range(written, written + n)], SCHEMA, start=written)
        written += n
        for kind, build in (("keyed", _keyed), ("spark", _spark)):
            results[kind].append(run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"),
                                           schema=SCHEMA, checkpoint_dir=str(tmp / f"ckpt-{kind}"),
                                           output_mode="append", extra_confs=CONFS, timeout=120))
    return results


@pytest.mark.lines
def test_window_counts_equal_sparks_after_every_available_now_run(window_runs):
    keyed, own = window_runs["keyed"], window_runs["spark"]
    expected = nodata_fns.model(spark_rule=False)
    cumulative_keyed, cumulative_own = set(), set()
    for r, run in enumerate(expected):
        # the same windows come out of the same run, i.e. once the same input files were read
        want = {e for b in run for e in b.emitted}
        assert _rows(keyed[r].batches) == _rows(own[r].batches) == want, f"run {r + 1}"
        cumulative_keyed |= _rows(keyed[r].batches)
        cumulative_own |= _rows(own[r].batches)
        assert cumulative_keyed == cumulative_own
    assert len(cumulative_keyed) == 10
    # Windows that only the watermark after a run's last file closes come out of the run's batch
    # without input, in both queries (run 1 and 3): without it they would wait for the next run.
    for r in (0, 2):
        assert expected[r][-1].file is None and expected[r][-1].emitted
        assert keyed[r].batches[keyed[r].batch_ids[-1]] == sorted(expected[r][-1].emitted)
        assert own[r].batches[own[r].batch_ids[-1]] == sorted(expected[r][-1].emitted)
    # no state_root or state_location: the state lives beside the query's checkpoint
    assert (window_runs["root"] / "ckpt-keyed" / "spark-state" / NAME).is_dir()


@pytest.mark.lines
def test_batch_ids_coincide_until_the_watermark_moves_with_no_timer_due(window_runs):
    """Spark runs a batch without input whenever the watermark moves (its operator cannot know
    whether a window closes), spark-state only when a timer is due at the moved watermark. Run 2's
    last file moves the watermark from 31 s to 33 s, which closes no window: Spark runs batch 7
    (empty), spark-state does not, so from run 3 on spark-state's batch ids are one lower. Runs 1
    and 3 end with a batch without input in both (windows close), and in runs 1-2 ids coincide."""
    def ids(kind):
        return [r.batch_ids for r in window_runs[kind]]

    assert ids("spark") == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10], []]
    assert ids("keyed") == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9], []]
    assert window_runs["spark"][1].batches[7] == []
    # batch by batch the same rows, Spark's ids one higher from its extra batch 7 on
    keyed = {b: rows for run in window_runs["keyed"] for b, rows in run.batches.items()}
    own = {b: rows for run in window_runs["spark"] for b, rows in run.batches.items()}
    assert keyed == {b if b < 7 else b - 1: rows for b, rows in own.items() if b != 7}
    # the model says the same
    for rule, kind in ((True, "spark"), (False, "keyed")):
        assert [len(run) for run in nodata_fns.model(spark_rule=rule)] == [len(r) for r in ids(kind)[:-1]]


@pytest.mark.lines
def test_a_run_without_new_files_runs_no_batch(spark, window_runs):
    """The 4th run has no new file: the saved observation of the last batch says no timer is
    due, so the tick source gives nothing and the run ends without a batch. Without the saved
    observation (a query stopped before its source saw the last batch's), a restart gets one
    batch, which fires what came due meanwhile -- here nothing."""
    last = window_runs["keyed"][-1]
    assert last.batches == {} and not [p for p in last.progress if p.get("numInputRows")]
    assert window_runs["spark"][-1].batches == {}
    # the tick source's record of the last batch (<checkpoint>/sources/<i>/observation): batch 9, nothing due
    # by the tasks' estimate, no processing-time timer, on Spark's time, watermark 42 s, the window [40, 50)
    # pending (Spark's next watermark, in the commit log, stays at 42 s: nothing due either)
    saved = sorted((window_runs["root"] / "ckpt-keyed" / "sources").glob("*/observation"))
    at_42s, at_50s = str(nodata_fns.EPOCH_MS + 42_000), str(nodata_fns.EPOCH_MS + 50_000)
    assert [p.read_text().split() for p in saved] == [["9", "false", "-", "true", at_42s, at_50s]]

    def run():
        return run_query(spark, _keyed, provider_class=HDFS_PROVIDER, input_dir=str(window_runs["root"] / "in"),
                         schema=SCHEMA, checkpoint_dir=str(window_runs["root"] / "ckpt-keyed"), output_mode="append",
                         extra_confs=CONFS, timeout=120)

    saved[0].unlink()
    assert run().batches == {10: []}
    assert saved[0].read_text().split() == ["10", "false", "-", "true", at_42s, at_50s] and run().batches == {}


@pytest.mark.lines
def test_progress_shows_the_figures_of_the_state(window_runs):
    """observedMetrics["spark_state.WindowCount"] of every batch against the model: tasks, keys
    in state, timers fired, late rows dropped, the watermark and what the tick source reads."""
    expected = [b for run in nodata_fns.model(spark_rule=False) for b in run]
    progress = [p for run in window_runs["keyed"] for p in run.progress]
    observed = _observations(progress)
    assert sorted(observed) == list(range(len(expected))), "every batch reports"
    for batch_id, (model, o) in enumerate(zip(expected, (observed[b] for b in sorted(observed)))):
        where = f"batch {batch_id}: {o}"
        assert o["batch"] == batch_id and o["tasks"] == PARALLELISM, where
        # Every open window is one map entry and one pending event-time timer: the engine counts
        # every key outside its system keyspace, and timers are ordinary keys of their key group
        # (spark_state.keys.timers), so they are in rows_total too.
        assert o["rows_total"] == 2 * model.open_windows, where
        assert o["timers_fired"] == len(model.emitted), where
        assert o["late_rows_dropped"] == model.late, where
        if batch_id:
            assert o["watermark_ms"] == model.watermark_ms, where
        else:
            assert not o["watermark_ms"], where
        read = model.file is not None
        assert (o["rows_updated"] > 0) == (read or bool(model.emitted)), where
        assert o["commit_ms"] >= 0 and o["state_bytes"] >= 0, where
        assert (o["checkpoint_bytes_written"] > 0) == (o["rows_updated"] > 0), where
        # what the tick source reads: the next batch's watermark, and whether a timer is due at it
        after = expected[batch_id + 1] if batch_id + 1 < len(expected) else None
        if after is not None:
            assert o["next_watermark_ms"] == after.watermark_ms, where
        assert o["event_timers_due"] == (after is not None and bool(after.emitted)), where
        assert o["next_processing_timer_ms"] is None, where
    # Loads: each run after the first restores its stores from checkpoint storage in its first
    # batch (the Python workers' stores belong to the run before): the changelogs since version 0
    # (no snapshot yet at these sizes). Other batches find a store cached, or replay what another
    # worker committed.
    firsts = {min(p["batchId"] for p in run.progress) for run in window_runs["keyed"][1:] if run.progress}
    for batch_id, o in observed.items():
        where = f"batch {batch_id}: {o}"
        assert o["load_ms"] >= 0 and (o["load_files_fetched"] > 0) == (o["load_bytes_fetched"] > 0), where
        if batch_id in firsts:
            assert o["load_ms"] > 0 and o["changelog_bytes_replayed"] > 0, where


def _count(text: str) -> int:
    """A count metric as the SQL tab shows it ("1,234"; never updated: absent)."""
    return int(text.replace(",", "") or 0)


def _total(text: str) -> float:
    """The total of a size or timing metric as the SQL tab shows it ("total (min, med, max ...)\n
    12.5 KiB (...)": 12.5); 0 when never updated."""
    lines = text.splitlines()
    return float(lines[1].split()[0].replace(",", "")) if len(lines) > 1 else 0.0


def test_the_sql_tab_shows_the_figures_of_the_state(spark, window_runs):
    """The Spark UI's SQL tab has a node SparkStateFunction WindowCount in every batch's plan,
    whose metrics are the batch's figures of the progress (summed over the tasks). (Through a
    foreachBatch sink, Spark before 4.3 shows no metric values of any node of the batch's plan:
    the lines run the memory-sink test below.)"""
    progress = [p for run in window_runs["keyed"] for p in run.progress]
    observed = _observations(progress)
    deadline = time.monotonic() + 30
    while True:  # the status store follows Spark's listener bus, which is asynchronous
        tab = sql_tab(spark, progress[0]["id"])
        shown = {b: nodes["SparkStateFunction " + NAME] for b, nodes in tab.items()
                 if "SparkStateFunction " + NAME in nodes}
        if set(observed) <= set(shown) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # (a later test of this module runs the query once more: its batches may be there too)
    assert set(observed) <= set(shown), "every batch's plan has the function's node"
    for b, o in sorted(observed.items()):
        metrics, where = shown[b], f"batch {b}: {shown[b]} vs {o}"
        assert _count(metrics["number of total state rows"]) == o["rows_total"], where
        assert _count(metrics["number of updated state rows"]) == o["rows_updated"], where
        assert _count(metrics["number of timers fired"]) == o["timers_fired"], where
        assert _count(metrics["number of rows which are dropped by watermark"]) == o["late_rows_dropped"], where
        assert (_total(metrics["bytes written to checkpoint storage"]) > 0) == (o["checkpoint_bytes_written"] > 0), where
        assert (_total(metrics["state size in the backends"]) > 0) == (o["state_bytes"] > 0), where
        assert "time to commit changes" in metrics, where
    # Spark's own query over the same input has no such node
    spark_tab = sql_tab(spark, window_runs["spark"][0].progress[0]["id"])
    assert spark_tab and not [n for nodes in spark_tab.values() for n in nodes if n.startswith("SparkStateFunction")]


@pytest.mark.lines
def test_the_sql_tab_shows_checkpointed_process(spark, tmp_path):
    """A checkpointed function writing to the memory sink: its node in the SQL tab of each batch
    has the batch's figures."""
    _ship()
    write_batches(tmp_path / "in", [file_rows(0), file_rows(1)], SCHEMA)
    out = checkpointed_process(spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(
        str(tmp_path / "in")), nodata_fns.Collect(), WINDOW_OUTPUT, parallelism=2, name="CollectShown")
    query = (out.writeStream.format("memory").queryName("collect_shown").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        progress = [json.loads(p.json()) for p in query._jsq.recentProgress()]
    finally:
        query.stop()
    observed = _observations(progress, "CollectShown")
    assert sorted(observed) == [0, 1]
    deadline = time.monotonic() + 30
    while True:  # the status store follows Spark's listener bus, which is asynchronous
        shown = {b: nodes.get("SparkStateFunction CollectShown") for b, nodes in sql_tab(spark, str(query.id)).items()}
        if (sorted(shown) == [0, 1] and all(_count(m.get("number of total state rows", "")) for m in shown.values() if m)
                or time.monotonic() > deadline):
            break
        time.sleep(0.5)
    for b, o in observed.items():
        metrics, where = shown[b], f"batch {b}: {shown[b]} vs {o}"
        assert _count(metrics["number of total state rows"]) == o["rows_total"] > 0, where
        assert _count(metrics["number of updated state rows"]) == o["rows_updated"], where
        assert _total(metrics["bytes written to checkpoint storage"]) > 0, where
        assert _count(metrics["number of timers fired"]) == 0, where  # no time: the figures are null


def test_checkpointed_process_reports_tasks_and_rows(spark, tmp_path):
    _ship()
    write_batches(tmp_path / "in", [file_rows(0), file_rows(1)], SCHEMA)
    out = run_query(spark, lambda df: checkpointed_process(df, nodata_fns.Collect(), WINDOW_OUTPUT, parallelism=3),
                    provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append", extra_confs=CONFS, timeout=120)
    observed = _observations(out.progress, "Collect")
    assert out.batch_ids == [0, 1] and sorted(observed) == [0, 1], "no timers: no batch without input"
    rows = 0
    for b, o in sorted(observed.items()):
        rows += len(nodata_fns.FILES[b])
        # one store entry per list element (spark_state.process.operator_state); schema records are system keys
        assert o["tasks"] == 3 and o["rows_total"] == rows, o
        assert o["rows_updated"] >= len(nodata_fns.FILES[b]) and o["checkpoint_bytes_written"] > 0, o
        # no time: the time figures are null, and nothing is due
        assert o["timers_fired"] is o["late_rows_dropped"] is o["watermark_ms"] is o["next_watermark_ms"] is None, o
        assert o["event_timers_due"] is False, o


# ------------------------------------------------------------- processing-time trigger, idle
class _Query:
    """A query under ``trigger(processingTime=...)`` whose foreachBatch sink keeps every batch."""

    def __init__(self, df, checkpoint):
        self.outputs: dict[int, list] = {}
        self.lock = threading.Lock()
        self.query = (df.writeStream.foreachBatch(self._sink).outputMode("append")
                      .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())

    def _sink(self, batch_df, batch_id):
        rows = [tuple(r) for r in batch_df.collect()]
        with self.lock:
            self.outputs[batch_id] = rows

    def rows(self) -> set:
        with self.lock:
            return {r for rows in self.outputs.values() for r in rows}

    def batch_ids(self) -> list[int]:
        with self.lock:
            return sorted(self.outputs)

    def progress_batch_ids(self) -> set:
        """Ids of the batches the progress reports as run (an idle query also reports, every
        ``noDataProgressEventInterval``, with the id of the batch it has not run: no ``addBatch``)."""
        reports = [json.loads(p.json()) for p in self.query._jsq.recentProgress()]
        return {p["batchId"] for p in reports if "addBatch" in (p.get("durationMs") or {})}


@pytest.fixture(scope="module")
def idle_queries(spark, tmp_path_factory):
    """Every input file at once, then an idle source: the keyed and Spark's window count, and a
    keyed function without timers, all under a 200 ms processing-time trigger."""
    _ship()
    tmp = tmp_path_factory.mktemp("idle")
    write_batches(tmp / "in", [file_rows(i) for i in range(len(nodata_fns.FILES))], SCHEMA)
    write_batches(tmp / "few", [file_rows(0), file_rows(1)], SCHEMA)
    before = {k: spark.conf.get(k) for k in CONFS}
    for k, v in CONFS.items():
        spark.conf.set(k, str(v))

    def stream(d):
        return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(tmp / d))

    queries = {}
    try:
        queries["keyed"] = _Query(_keyed(stream("in")), str(tmp / "ckpt-keyed"))
        queries["spark"] = _Query(_spark(stream("in")), str(tmp / "ckpt-spark"))
        no_timers = keyed_process(stream("few"), "key", nodata_fns.CountOnly(), WINDOW_OUTPUT, parallelism=PARALLELISM)
        queries["no_timers"] = _Query(no_timers, str(tmp / "ckpt-none"))
        want = {e for run in nodata_fns.model(spark_rule=False) for b in run for e in b.emitted}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (queries["keyed"].rows() == want == queries["spark"].rows()):
            time.sleep(0.25)
        # The sink sees a batch's rows before the batch ends and its progress is reported: wait
        # until every batch the sinks saw is reported (and the query without timers read its files).
        while time.monotonic() < deadline and not (
                len(queries["no_timers"].batch_ids()) >= 2
                and all(set(q.batch_ids()) == q.progress_batch_ids() for q in queries.values())):
            time.sleep(0.25)
        settled = {k: (q.batch_ids(), q.progress_batch_ids()) for k, q in queries.items()}
        time.sleep(5)
        later = {k: (q.batch_ids(), q.progress_batch_ids()) for k, q in queries.items()}
        yield {"queries": queries, "want": want, "settled": settled, "later": later}
    finally:
        for q in queries.values():
            q.query.stop()
        for k, v in before.items():
            spark.conf.set(k, v)


def test_an_idle_source_gets_every_window_the_final_watermark_closes(idle_queries):
    queries, want = idle_queries["queries"], idle_queries["want"]
    assert queries["keyed"].rows() == want == queries["spark"].rows()


def test_no_batch_runs_while_nothing_is_due(idle_queries):
    settled, later = idle_queries["settled"], idle_queries["later"]
    for kind in ("keyed", "spark", "no_timers"):
        assert later[kind] == settled[kind], f"{kind}: no batch in 5 s of idleness"
    # all files, then one batch without input for the windows the final watermark closes
    files = len(nodata_fns.FILES)
    assert settled["keyed"][0] == list(range(files + 1))
    # without timers: one batch per file, nothing after
    assert settled["no_timers"][0] == [0, 1]
