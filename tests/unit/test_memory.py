"""All RocksDB stores of a process share one block cache and write-buffer manager."""

from __future__ import annotations

from pathlib import Path

from spark_state import EngineConfig, VersionedStore
from spark_state.backends import backend_factory
from spark_state.backends.rocksdb_resources import shared_resources


def test_rocksdb_stores_share_one_memory_budget(tmp_path):
    cfg = EngineConfig(backend="rocksdb", block_cache_mb=64, write_buffer_mb=16, local_dir=str(tmp_path / "l"))
    first = backend_factory("rocksdb", cfg)
    second = backend_factory("rocksdb", cfg)
    assert first.resources is second.resources
    resources = first.resources
    before = resources.usage_bytes()
    stores = [VersionedStore(str(tmp_path / f"ckpt{i}"), cfg) for i in range(3)]
    try:
        for i, store in enumerate(stores):
            store.load(0)
            store.put_many((b"%d-%06d" % (i, n) for n in range(5000)), (b"x" * 100 for _ in range(5000)))
            store.commit()
        # Memtables of all three stores are charged to the one shared cache.
        assert resources.usage_bytes() > before
        assert resources.write_buffer_manager.get_usage() > 0
    finally:
        for store in stores:
            store.close()


def test_a_new_size_resizes_the_shared_budget():
    resources = shared_resources(64, 16)
    again = shared_resources(128, 32)
    assert again is resources
    assert (again.block_cache_mb, again.write_buffer_mb) == (128, 32)
    assert again.write_buffer_manager.get_buffer_size() == 32 * 1024 * 1024


def _figures(table_properties: str) -> dict[str, str]:
    return dict(part.strip().split("=", 1) for part in table_properties.split(";") if "=" in part)


def test_a_reopened_database_keeps_the_shared_cache_and_bloom_filters(tmp_path):
    """A restored snapshot is an existing database directory: it must be opened with the shared
    block cache and write bloom filters like a new one (rocksdb would otherwise take the column
    family options of the directory's OPTIONS file: a private 8 MB cache, no filters)."""
    cfg = EngineConfig(backend="rocksdb", block_cache_mb=48, write_buffer_mb=16, local_dir=str(tmp_path / "l"))
    factory = backend_factory("rocksdb", cfg)
    directory = str(tmp_path / "db")
    for generation in (b"a", b"b"):  # new, then reopened
        backend = factory.open_snapshot(directory)
        backend.apply((generation + b"%07d" % n, b"v" * 16) for n in range(20_000))
        db = backend._db  # type: ignore[attr-defined]
        db.flush()
        assert db.property_int_value("rocksdb.block-cache-capacity") == 48 * 1024 * 1024
        figures = _figures(db.property_value("rocksdb.aggregated-table-properties"))
        assert figures["# entries for filter"] == figures["# entries"] != "0"
        backend.close()


# ------------------------------------------------------------------ task slots and the keyed functions' part
def test_task_slots_of_a_conf_count_what_an_executor_runs_at_once():
    from spark_state import memory

    assert memory.task_slots({"spark.master": "local[3]"}) == 3
    assert memory.task_slots({"spark.master": "local"}) == 1
    assert memory.task_slots({"spark.master": "local[*]"}, processors=6) == 6
    assert memory.task_slots({"spark.master": "local-cluster[2,3,1024]"}) == 3
    assert memory.task_slots({"spark.master": "yarn", "spark.executor.cores": "5"}) == 5
    assert memory.task_slots({"spark.master": "local[4]", "spark.task.cpus": "2"}) == 2
    # Standalone: an executor takes all the worker's free cores and the conf does not say how many;
    # counting one slot there gave every slot the part of all of them.
    assert memory.task_slots({"spark.master": "spark://host:7077"}, processors=8) == 8


def _publish(directory, slots: int, budget: int) -> None:
    from spark_state import memory

    (directory / memory.EXECUTOR_FILE).write_text(f'{{"taskSlots": {slots}, "budgetBytes": {budget}}}')


def test_a_keyed_functions_part_comes_from_the_figures_its_executor_published(tmp_path, monkeypatch):
    from spark_state import memory

    standalone = {"spark.master": "spark://host:7077", "spark.executor.memory": "4g"}
    local_dir = tmp_path / "blockmgr-1"
    local_dir.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{local_dir},{tmp_path / 'other'}")
    assert memory.executor_figures() is None  # nothing published: the conf's rule
    assert memory.function_process_share(standalone) == memory.budget_bytes(standalone) // 12 // memory.task_slots(
        standalone)
    other = tmp_path / "blockmgr-2"
    other.mkdir()
    _publish(other, 8, 1 << 30)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(other))
    assert memory.executor_figures() == memory.ExecutorFigures(8, 1 << 30)
    assert memory.executor_task_slots(standalone) == 8
    assert memory.function_process_share(standalone) == (1 << 30) // 12 // 8


def test_a_keyed_task_sets_the_options_the_budget_sets_from_its_executor(tmp_path, monkeypatch):
    """The definition (driver) cannot count a standalone executor's slots; its tasks take the JVM's
    count, and leave what the user set alone."""
    from spark_state import memory
    from spark_state.process.options import ProcessOptions

    conf = (("spark.executor.memory", "4g"), ("spark.master", "spark://host:7077"))
    engine = EngineConfig(spill_threshold_bytes=123 << 20, block_cache_mb=256, write_buffer_mb=128)
    options = ProcessOptions("F", None, engine, 2, None,  # type: ignore[arg-type]
                             function_memory=memory.FunctionMemory(conf, memory.budget_defaults(
                                 {memory.SPILL_THRESHOLD_OPTION: "123m"})))
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    _publish(tmp_path, 4, 1 << 30)
    expected = memory.process_settings((1 << 30) // 12 // 4)  # 21 MB a process
    task = options.task_engine()
    assert (task.block_cache_mb, task.write_buffer_mb) == (expected.block_cache_mb, expected.write_buffer_mb)
    assert task.spill_threshold_bytes == 123 << 20  # set by the user
    assert ProcessOptions("F", None, engine, 2, None).task_engine() is engine  # type: ignore[arg-type]


# ------------------------------------------------------------------ the one table policy
_SHIM = (Path(__file__).resolve().parents[2]
         / "jvm-shim/src/main/scala/org/apache/spark/sql/execution/streaming/state/sparkstate")


def _options_file(directory) -> str:
    return sorted(Path(directory).rglob("OPTIONS-*"))[-1].read_text()


def test_stores_and_spill_runs_charge_index_and_filter_blocks_to_the_cache(tmp_path):
    """One table policy (rocksdb_resources.table_options): a store's database and the engine's
    spill runs keep index and filter blocks in the block cache, partitioned, with high priority."""
    from spark_state.engine.spill import SpillRuns

    cfg = EngineConfig(backend="rocksdb", block_cache_mb=32, write_buffer_mb=8, local_dir=str(tmp_path / "l"))
    backend = backend_factory("rocksdb", cfg).open_snapshot(str(tmp_path / "db"))
    backend.apply((b"%08d" % n, b"v") for n in range(1000))
    runs = SpillRuns(str(tmp_path / "spill"), shared_resources(32, 8).block_cache)
    runs.write_run((b"%08d" % n, b"\0\0v") for n in range(1000))
    assert runs.get(b"%08d" % 7) == b"\0\0v"
    for text in (_options_file(tmp_path / "db"), _options_file(tmp_path / "spill")):
        for setting in ("cache_index_and_filter_blocks=true", "cache_index_and_filter_blocks_with_high_priority=true",
                        "pin_l0_filter_and_index_blocks_in_cache=true", "partition_filters=true",
                        "index_type=kTwoLevelIndexSearch", "pin_top_level_index_and_filter=true",
                        "format_version=5"):
            assert setting in text, setting
    runs.close()
    backend.close()


def test_the_jvm_uses_the_same_table_policy():
    from spark_state.backends import rocksdb_resources as R

    scala = (_SHIM / "RocksResources.scala").read_text()
    assert f"val BloomBitsPerKey = {R.BLOOM_BITS_PER_KEY}" in scala
    assert f"val HighPriorityPoolRatio = {R.HIGH_PRIORITY_POOL_RATIO}" in scala
    assert f"val TableFormatVersion = {R.TABLE_FORMAT_VERSION}" in scala
    for call in ("setCacheIndexAndFilterBlocks(true)", "setCacheIndexAndFilterBlocksWithHighPriority(true)",
                 "setPinL0FilterAndIndexBlocksInCache(true)", "setPartitionFilters(true)",
                 "setIndexType(IndexType.kTwoLevelIndexSearch)", "setPinTopLevelIndexAndFilter(true)",
                 "new LRUCache(MemoryBudget.jvmCacheBytes, -1, false, HighPriorityPoolRatio)"):
        assert call in scala, call


def test_the_remembered_reads_bound_is_one_in_each_language():
    from spark_state.engine.overlay import WriteOverlay

    scala = (_SHIM / "ChangeBuffer.scala").read_text()
    assert f"val MaxRememberedReads = 1 << {WriteOverlay.MAX_REMEMBERED_READS.bit_length() - 1}" in scala


# ------------------------------------------------------------------ the budget's one rule
def test_the_budget_splits_into_named_parts_the_jvm_weighs_the_same():
    """One rule, the JVM's MemoryBudget; Python holds the same weights, fraction and floor."""
    from spark_state import memory

    scala = (_SHIM / "MemoryBudget.scala").read_text()
    for name, weight in memory.WEIGHTS.items():
        assert f"val {name[0].upper()}{name[1:]}Weight = {weight}" in scala, name
    assert f"val DefaultFraction = {memory.DEFAULT_FRACTION}" in scala
    assert f"val MinBudget: Long = {memory.MIN_BUDGET >> 20}L * 1024 * 1024" in scala
    gb = 1 << 30
    for heap, parts in ((gb, {"heapMaps": 512, "heap": 64, "jvmCache": 64, "workers": 64, "functions": 64}),
                        (4 * gb, {"heapMaps": 2048, "heap": 256, "jvmCache": 256, "workers": 256,
                                  "functions": 256})):
        budget = memory.budget_bytes({"spark.master": "spark://h:7077", "spark.executor.memory": str(heap)})
        assert {name: memory.part_bytes(name, budget) >> 20 for name in memory.WEIGHTS} == parts
    # An explicit budget is split by the same weights.
    assert memory.part_bytes("functions", memory.budget_bytes({memory.BUDGET_CONF: "1200m"})) == 100 << 20


def test_executor_memory_of_a_local_cluster_is_the_executors_own():
    """local-cluster[N,c,m] runs executors in JVMs of their own, sized by spark.executor.memory (the
    m is a worker's memory); only local and local[n] run the executor in the driver."""
    from spark_state import memory

    conf = {"spark.driver.memory": "3g", "spark.executor.memory": "2g"}
    assert memory.executor_memory({**conf, "spark.master": "local-cluster[2,1,4096]"}) == 2 << 30
    assert memory.executor_memory({"spark.master": "local-cluster[2,1,4096]"}) == 1 << 30  # Spark's default
    assert memory.executor_memory({**conf, "spark.master": "local[2]"}) == 3 << 30
    assert memory.executor_memory({**conf, "spark.master": "local"}) == 3 << 30


def test_the_no_stall_trigger_of_spill_runs_is_one_in_each_language():
    from spark_state.engine.spill import NO_STALL_L0_FILES

    scala = (_SHIM / "SpillRuns.scala").read_text()
    assert f"val NoStallL0Files: Int = 1 << {NO_STALL_L0_FILES.bit_length() - 1}" in scala
    assert scala.count("NoStallL0Files") == 3  # defined, then the slowdown and the stop trigger
