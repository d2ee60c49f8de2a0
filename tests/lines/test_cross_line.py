"""State crosses Spark lines: a checkpoint written on Spark 4.2 continues on 4.3 in place (Spark
upgrades happen in place), and a savepoint taken on Spark 3.5 restores on 4.3 at another
partition count and parallelism. The older line's part runs in its compatibility venv
(``.venv-lines/spark-<line>``), the rest in this test session; every batch, batch ids included,
equals Spark's HDFS provider stopped and restarted at the same batch (built-in operators) or the
model (keyed_process with event-time timers).

A missing venv fails these tests, naming the command that builds it (``./dev test-lines <line>``):
a skip would let a CI run pass without ever crossing a line. ``./dev test`` builds every older
line's venv before it runs this suite, and points :data:`LINE_VENVS_ENV` at them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import cross_line_fns as X
import test_operator_equivalence as E
from spark_state import ops
from spark_state.spark.lines import NEWEST, running_line
from streaming_harness import SPARKSTATE_PROVIDER, short_name

pytestmark = pytest.mark.spark

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "line_job.py")
#: Set by ./dev: the directory holding the compatibility venvs (spark-<line>/bin/python).
LINE_VENVS_ENV = "SPARK_STATE_LINE_VENVS"
#: Where ./dev builds them, when the variable is not set.
DEFAULT_LINE_VENVS = Path(__file__).resolve().parents[2] / ".venv-lines"
CASES = ("agg_update", "session_window")
CUT = 3


@pytest.fixture(autouse=True)
def _on_the_newest_line():
    if running_line() != NEWEST:
        pytest.skip(f"cross-line tests continue on the newest line ({NEWEST.name}); this is {running_line().name}")


def _python(line: str) -> str:
    """The python of ``line``'s compatibility venv; fails the test (never skips) when it is missing."""
    root = os.environ.get(LINE_VENVS_ENV)
    python = (Path(root) if root else DEFAULT_LINE_VENVS) / f"spark-{line}" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no Spark {line} virtualenv at {python}: build it with `./dev test-lines {line}` "
                    f"(`./dev test` builds every older line's before its tests and sets {LINE_VENVS_ENV})",
                    pytrace=False)
    return os.path.abspath(python)  # not resolved: a venv's python is a symlink to the base interpreter


def _job(line: str, *args) -> dict:
    python = _python(line)
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    proc = subprocess.run([python, JOB, *map(str, args)], capture_output=True, text=True, timeout=900, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{args[0]} job on Spark {line} failed:\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _normal(batches: dict) -> dict:
    """Batches as JSON gives them back (ids as strings, tuples as lists, datetimes as strings)."""
    return json.loads(json.dumps({str(b): rows for b, rows in batches.items()}, default=str))


def _older_part(line: str, kind: str, *args) -> dict:
    result = _job(line, kind, *args)
    assert result["pyspark"].startswith(line + "."), result["pyspark"]
    return result["batches"]


def test_a_checkpoint_written_on_4_2_continues_on_4_3(spark, tmp_path, tmp_path_factory):
    """On the default backend: a backend's files are written by the Python engine, the same on
    every line; what a line changes (the shim, Spark's logs) is the same for both backends."""
    provider = SPARKSTATE_PROVIDER
    _python("4.2")  # before the reference runs: a missing venv fails at once
    for name in CASES:
        case = E.CASES_BY_NAME[name]
        want = E.reference_run(spark, case, tmp_path_factory, cuts=(CUT,))
        root, checkpoint = tmp_path / name, tmp_path / name / "ckpt"
        first = _older_part("4.2", "case", name, provider, root, checkpoint, 0, CUT)
        second = E.run_case(spark, case, provider, E.write_inputs(case, root, start=CUT), checkpoint)
        assert min(second.batch_ids) > max(map(int, first)), "4.3 re-ran batches 4.2 had committed"
        assert {**first, **_normal(second.batches)} == _normal(want.batches), f"{name} on {short_name(provider)}"

    # keyed_process with event-time timers: its state and timers continue in place too
    root = tmp_path / "keyed"
    first = _older_part("4.2", "pageviews", root, root / "ckpt", root / "state", 0, CUT, 4)
    second = X.run_page_views(spark, str(root), str(root / "ckpt"), str(root / "state"), CUT, X.NUM_BATCHES, 4)
    assert {**first, **_normal(second.batches)} == _normal(X.expected())


def test_a_savepoint_taken_on_3_5_restores_on_4_3(spark, tmp_path, tmp_path_factory):
    _python("3.5")
    for name in CASES:
        case = E.CASES_BY_NAME[name]
        want = E.reference_run(spark, case, tmp_path_factory, cuts=(CUT,))
        root = tmp_path / name
        first = _older_part("3.5", "case", name, SPARKSTATE_PROVIDER, root, root / "ck1", 0, CUT)
        taken = _job("3.5", "savepoint", root / "ck1", root / "sp")
        assert taken["batch_id"] == max(map(int, first)) and taken["partitions"] == 4
        restored = ops.restore(str(root / "sp"), str(root / "ck2"), partitions=3, progress=False)
        assert restored.partitions == 3
        second = E.run_case(spark, case, SPARKSTATE_PROVIDER, E.write_inputs(case, root, start=CUT), root / "ck2")
        assert {**first, **_normal(second.batches)} == _normal(want.batches), name

    # keyed_process: saved at parallelism 4 on 3.5, continued at parallelism 3 on 4.3
    root = tmp_path / "keyed"
    first = _older_part("3.5", "pageviews", root, root / "ck1", root / "state1", 0, CUT, 4)
    _job("3.5", "savepoint", root / "ck1", root / "sp", root / "state1")
    ops.restore(str(root / "sp"), str(root / "ck2"), process_root=str(root / "state2"), progress=False)
    second = X.run_page_views(spark, str(root), str(root / "ck2"), str(root / "state2"), CUT, X.NUM_BATCHES, 3)
    assert {**first, **_normal(second.batches)} == _normal(X.expected())


def test_a_missing_line_venv_fails_naming_the_command_that_builds_it(tmp_path, monkeypatch):
    monkeypatch.setenv(LINE_VENVS_ENV, str(tmp_path))
    message = r"no Spark 3\.5 virtualenv at .*: build it with `\./dev test-lines 3\.5`"
    with pytest.raises(pytest.fail.Exception, match=message):
        _python("3.5")
    (tmp_path / "spark-3.5" / "bin").mkdir(parents=True)
    (tmp_path / "spark-3.5" / "bin" / "python").symlink_to("/bin/true")
    assert _python("3.5") == str(tmp_path / "spark-3.5" / "bin" / "python")
