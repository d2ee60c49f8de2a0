"""The Spark lines spark-state runs on, and which one is running.

A *line* is a Spark minor version (``3.5``, ``4.0``, ...): the provider contract of Spark's state
stores changes between lines, not within one, so spark-state ships one JVM shim jar per line,
compiled from ``jvm-shim/src/main`` (common to every line) plus the line's own source folders
(``spark-4.x`` shared by the 4.x lines, ``spark-4.2+`` by 4.2 and 4.3, ``spark-<line>``), against the
jars of the pyspark release named here. Standard library only: ``setup.py`` and ``spark_state.spark.jvm``
import it without pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["SparkLine", "LINES", "NEWEST", "Feature", "COMPATIBILITY", "line_of", "get_line", "running_line"]


@dataclass(frozen=True)
class SparkLine:
    """One supported Spark line."""

    #: ``major.minor``, e.g. ``"4.2"``
    name: str
    #: the pyspark release whose jars the line's shim jar is compiled against (its newest patch
    #: release when the line was added; the shim uses no API that changes within a line)
    build_version: str
    #: Scala binary version of the line's Spark build
    scala: str
    #: source folders under ``jvm-shim/src`` compiled with ``main`` for this line, in order
    source_folders: tuple[str, ...]

    @property
    def number(self) -> tuple[int, int]:
        """``(major, minor)``: lines compare by it (``3.5 < 4.0 < 4.10``)."""
        major, minor = self.name.split(".")
        return int(major), int(minor)

    def __lt__(self, other: "SparkLine") -> bool:
        return self.number < other.number

    @property
    def jar_name(self) -> str:
        """File name of the line's jar in a wheel (``spark_state/jars/``)."""
        return f"spark-state-shim-spark{self.name}.jar"


#: Every supported line, oldest first.
LINES: tuple[SparkLine, ...] = (
    SparkLine("3.5", "3.5.9", "2.12", ("spark-3.5",)),
    SparkLine("4.0", "4.0.5", "2.13", ("spark-4.x", "spark-4.0")),
    SparkLine("4.1", "4.1.4", "2.13", ("spark-4.x", "spark-4.1")),
    SparkLine("4.2", "4.2.1", "2.13", ("spark-4.x", "spark-4.2+", "spark-4.2")),
    SparkLine("4.3", "4.3.0", "2.13", ("spark-4.x", "spark-4.2+", "spark-4.3")),
)
_BY_NAME = {line.name: line for line in LINES}
#: The newest line: the full test suite runs on it, the others run the compatibility suite.
NEWEST = LINES[-1]


def _supported() -> str:
    return ", ".join(line.name for line in LINES)


def line_of(version: str) -> SparkLine:
    """The line of a Spark or pyspark version (``4.2.1``, ``4.2.0.dev1``, ``3.5``).

    Raises:
        ConfigError: the version is not of a supported line, naming the lines that are.
    """
    parts = version.strip().split(".")
    name = ".".join(parts[:2])
    if len(parts) < 2 or name not in _BY_NAME:
        raise ConfigError(f"Spark {version} is not supported by spark-state: it runs on Spark {_supported()} "
                          f"(pyspark 3.5.x and 4.0.x to {NEWEST.name}.x)")
    return _BY_NAME[name]


def get_line(name: str) -> SparkLine:
    """A line by name (``3.5``), or by a version of it (``3.5.2``)."""
    return line_of(name)


def running_line() -> SparkLine:
    """The line of the installed pyspark."""
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise ConfigError("pyspark is not installed; pip install 'pyspark>=3.5,<4.4'") from exc
    return line_of(pyspark.__version__)


@dataclass(frozen=True)
class Feature:
    """A row of ``docs/compatibility.md``: what works on which line, and the tests that show it. Each
    test is in the compatibility suite (marked ``lines``), which CI runs on every line, so a
    "yes" is a test that passed there; ``limits`` says where a line lacks something Spark-side
    and what spark-state does instead (the same tests check it)."""

    name: str
    tests: tuple[str, ...]
    limits: tuple[tuple[str, str], ...] = ()

    def on(self, line: SparkLine) -> str:
        return dict(self.limits).get(line.name, "yes")


COMPATIBILITY: tuple[Feature, ...] = (
    Feature("The provider: every built-in stateful operator, each batch equal to Spark's HDFS provider's, "
            "batch ids included, on the default backend, with many-key eviction for a join and session windows; "
            "complete-mode aggregation and session windows on hashmap too (the newest line's suite runs every "
            "case, many-key eviction in every operator, on both backends)",
            ("tests/spark/test_operator_equivalence.py::test_operator_matches_hdfs",)),
    Feature("A restart after the query died between batches",
            ("tests/spark/test_operator_equivalence.py::test_restart_after_crash_between_batches",)),
    Feature("A provider worker killed mid-stream is replaced, nothing lost",
            ("tests/spark/test_provider.py::test_worker_killed_between_load_and_commit_is_replaced_transparently",)),
    Feature("Spark's state data source (`format(\"statestore\")`) reads spark-state's state",
            ("tests/spark/test_provider.py::test_state_data_source_reads_our_state",),
            (("3.5", "Spark 4.0+ (3.5 has no reader): `spark-state inspect` counts the same rows"),)),
    Feature("Spark's change feed (`readChangeFeed`) of spark-state's state equals Spark's RocksDB provider's, "
            "per batch and key",
            ("tests/spark/test_provider.py::test_sparks_change_feed_of_our_state_equals_sparks_rocksdb_provider",),
            (("3.5", "Spark 4.0+ (3.5's reader has no change feed)"),)),
    Feature("spark-state's data source (`format(\"spark-state\")`, SQL `USING`) gives the rows of the Python "
            "readers (`read_keyed_state`, `read_timers`, `read_change_feed`, `read_function_operator_state`)",
            ("tests/state_data/test_data_source.py::test_the_data_source_equals_the_python_readers",
             "tests/state_data/test_data_source.py::test_on_spark_35_registering_names_the_line_and_the_functions"),
            (("3.5", "Spark 4.0+ (the Python Data Source API); registering says so: the Python readers give the "
                     "same rows"),)),
    Feature("The metadata table (`state_metadata`, `spark-state inspect --json`, `format(\"spark-state-metadata\")`): "
            "one row per state, timer service and Spark operator store of a checkpoint or savepoint",
            ("tests/state_data/test_data_source.py::test_state_metadata_of_a_checkpoint_and_its_savepoint",),
            (("3.5", "`state_metadata` and `inspect --json` yes; `format(\"spark-state-metadata\")` is Spark 4.0+ "
                     "(the Python Data Source API)"),)),
    Feature("`keyed_process` with event-time timers, a restart and a task retry inside `on_timer`",
            ("tests/process/test_time.py::test_event_time_page_view_counter_matches_the_model",
             "tests/process/test_time.py::test_restart_and_a_task_retry_inside_on_timer_give_identical_results")),
    Feature("Two connected inputs (`keyed_co_process`)",
            ("tests/process/test_two_inputs_and_broadcast.py::test_two_stream_full_join_in_list_state",)),
    Feature("Broadcast rules (`keyed_broadcast_process`) across a rescale",
            ("tests/process/test_two_inputs_and_broadcast.py::"
             "test_broadcast_rules_change_mid_stream_and_survive_a_rescale",)),
    Feature("TTL: the provider's (`dropDuplicates` kept bounded, on both backends) and a keyed function's "
            "state descriptors'",
            ("tests/spark/test_provider_ttl.py::test_dedup_with_ttl_keeps_state_bounded_while_hdfs_grows",
             "tests/process/test_keyed_ttl.py::test_values_and_list_elements_expire_on_the_injected_clock")),
    Feature("Operator state redistributed when the parallelism changes",
            ("tests/process/test_operator_state.py::test_operator_state_redistribution_on_4_3_6",)),
    Feature("Savepoint, then restore at another partition count and parallelism",
            ("tests/ops/test_savepoint_restore.py::test_savepoint_restore_3_5_2_equals_an_uninterrupted_run",
             "tests/ops/test_savepoint_restore.py::test_keyed_process_savepoint_restore_and_parallelism_change")),
    Feature("The command line: `inspect`, `savepoint` and `restore` with `--json`, refused savepoints",
            ("tests/ops/test_cli.py::test_inspect_json_and_text",
             "tests/ops/test_cli.py::test_savepoint_restore_by_cli_and_refused_savepoints")),
    Feature("Migrate a checkpoint to Spark's RocksDB provider",
            ("tests/ops/test_migrate.py::test_migrating_to_sparks_rocksdb_provider_on_each_line",),
            tuple((name, "Spark 4.2+ (`loadEmpty`); refused at once, naming 4.2, past batch 0")
                  for name in ("3.5", "4.0", "4.1"))),
    Feature("The wheel installs next to the line's pyspark without changing it; `spark-state jar` gives "
            "the line's jar without compiling",
            ("tests/packaging/test_wheel.py::test_installing_the_wheel_keeps_the_installed_pyspark",
             "tests/packaging/test_wheel.py::"
             "test_the_installed_wheel_runs_a_provider_query_without_compiler_or_writable_home")),
)
