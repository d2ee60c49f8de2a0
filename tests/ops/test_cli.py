"""The command line: --help on every command, --json, exit codes, clear errors; corrupt and
partial savepoints are refused with a message naming the file; a savepoint taken while the
query runs is consistent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

import test_operator_equivalence as E
from ops_support import assert_equal_to_uninterrupted, reference, run
from spark_state import ops
from spark_state.deprecation import SparkStateDeprecationWarning
from spark_state.errors import ConfigError

pytestmark = pytest.mark.spark

COMMANDS = ["inspect", "savepoint", "restore", "rescale", "migrate", "move-state", "jar", "server-conf"]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "spark_state", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def checkpoint(spark, tmp_path_factory):
    case = E.CASES_BY_NAME["dedup"]
    root = tmp_path_factory.mktemp("cli")
    run(spark, case, root / "ck", E.write_inputs(case, root, upto=3), partitions=2)
    return root / "ck"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    out = cli(command, "--help")
    assert out.returncode == 0 and "usage:" in out.stdout and command in out.stdout


def test_top_level_help_and_bad_arguments():
    out = cli("--help")
    assert out.returncode == 0 and all(c in out.stdout for c in COMMANDS)
    assert cli().returncode == 2
    bad = cli("rescale", "/nowhere")  # --partitions is required
    assert bad.returncode == 2 and "--partitions" in bad.stderr
    assert cli("restore", "a", "b", "--backend", "nope").returncode == 2


@pytest.mark.lines
def test_inspect_json_and_text(checkpoint):
    out = cli("inspect", str(checkpoint), "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["last_committed_batch"] == 2 and info["provider"] == "spark-state" and info["partitions"] == 2
    [op] = info["operators"]
    assert op["name"] == "dedupe" and op["partitions"] == 2 and op["store_names"] == ["default"]
    rows = len({i for b in E.CASES_BY_NAME["dedup"].batches[0][:3] for i, _ in b})
    assert op["rows"] == rows and op["stores"][0]["retained_versions"] == "1..3"
    assert op["stores"][0]["ttl_stamped"] is False
    text = cli("inspect", str(checkpoint))
    assert text.returncode == 0 and "operator 0 dedupe" in text.stdout and f"rows {rows}" in text.stdout


def test_missing_checkpoint_is_exit_1_with_the_path(tmp_path):
    out = cli("inspect", str(tmp_path / "nope"), "--json")
    assert out.returncode == 1
    assert f"{tmp_path / 'nope'} does not exist" in out.stderr
    assert json.loads(out.stdout)["error"] == "NotACheckpointError"
    (tmp_path / "empty").mkdir()
    out = cli("inspect", str(tmp_path / "empty"))
    assert out.returncode == 1 and f"{tmp_path / 'empty'} is not a Spark streaming checkpoint" in out.stderr


@pytest.mark.lines
def test_savepoint_restore_by_cli_and_refused_savepoints(checkpoint, tmp_path):
    sp = tmp_path / "sp"
    out = cli("savepoint", str(checkpoint), str(sp), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["batch_id"] == 2 and result["keys"] > 0
    again = cli("savepoint", str(checkpoint), str(sp))
    assert again.returncode == 1 and "already holds a savepoint" in again.stderr
    assert cli("savepoint", str(checkpoint), str(tmp_path / "sp0"), "--batch", "7").returncode == 1

    ok = cli("restore", str(sp), str(tmp_path / "r1"), "--partitions", "3", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["partitions"] == 3
    assert cli("restore", str(sp), str(tmp_path / "r1")).returncode == 1  # target is a checkpoint now

    # a damaged state file: refused, naming the file
    state = sp / "state" / "0" / "default" / "1.arrow"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    bad = cli("restore", str(sp), str(tmp_path / "r2"))
    assert bad.returncode == 1 and str(state) in bad.stderr and "CRC-32" in bad.stderr
    # a missing Spark file
    os.remove(sp / "spark" / "commits" / "2")
    bad = cli("restore", str(sp), str(tmp_path / "r3"))
    assert bad.returncode == 1 and str(sp / "spark" / "commits" / "2") in bad.stderr
    # partial: no manifest (an interrupted savepoint)
    os.remove(sp / "savepoint.json")
    bad = cli("restore", str(sp), str(tmp_path / "r4"), "--json")
    assert bad.returncode == 1 and str(sp / "savepoint.json") in bad.stderr and "interrupted" in bad.stderr
    assert json.loads(bad.stdout)["error"] == "SavepointError"
    assert not os.path.exists(tmp_path / "r4" / "metadata")


def test_savepoint_refuses_the_checkpoint_itself_and_a_directory_that_is_not_empty(checkpoint, tmp_path):
    """Into the checkpoint, a directory inside it or one holding it, or a directory with other
    files: refused before anything is written (command line and Python alike)."""
    for target, where in ((checkpoint, "is"), (checkpoint / "sp", "is inside"), (checkpoint.parent, "holds")):
        out = cli("savepoint", str(checkpoint), str(target), "--json")
        assert out.returncode == 1, out.stdout
        message = (f"the savepoint directory {target} {where} the checkpoint {checkpoint}: a savepoint must live "
                   "outside every checkpoint (the query and its retention write and delete files there); choose a "
                   "new directory outside it")
        assert json.loads(out.stdout) == {"error": "TargetInsideSourceError", "message": message}
        assert out.stderr.strip().endswith(f"error: {message}")
        with pytest.raises(ops.TargetInsideSourceError, match=f"{where} the checkpoint"):
            ops.savepoint(str(checkpoint), str(target), progress=False)
    assert not (checkpoint / "sp").exists() and not (checkpoint / "savepoint.json").exists()

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not a savepoint")
    out = cli("savepoint", str(checkpoint), str(mine), "--json")
    assert out.returncode == 1
    message = (f"the savepoint directory {mine} is not empty (it holds notes.txt): a savepoint is written into a new "
               "or empty directory, so that its files cannot mix with others; choose a new directory")
    assert json.loads(out.stdout) == {"error": "TargetExistsError", "message": message}
    with pytest.raises(ops.TargetExistsError, match="is not empty"):
        ops.savepoint(str(checkpoint), str(mine), progress=False)
    assert os.listdir(mine) == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert ops.savepoint(str(checkpoint), str(tmp_path / "empty"), progress=False).batch_id == 2  # empty is fine


def test_restore_refuses_a_manifest_whose_batch_its_files_contradict(checkpoint, tmp_path):
    """A manifest whose batch id was edited (its files still hold Spark's logs up to the real
    batch) is refused at restore, naming the savepoint, the batch and what the files say."""
    sp = tmp_path / "sp"
    ops.savepoint(str(checkpoint), str(sp), progress=False)
    manifest = sp / "savepoint.json"
    doc = json.loads(manifest.read_text())
    assert doc["batch_id"] == 2
    doc["batch_id"] = 1
    manifest.write_text(json.dumps(doc))
    out = cli("restore", str(sp), str(tmp_path / "restored"), "--json")
    assert out.returncode == 1
    message = (f"{manifest} says batch 1, but its files hold Spark's logs up to another batch (the offset log has "
               "batches 0..2; the commit log has batches 0..2): the manifest does not match its files (edited, or "
               "copied from another savepoint), and a query restored from it would look for state of a batch the "
               "savepoint does not hold. Take a new savepoint")
    assert json.loads(out.stdout) == {"error": "SavepointError", "message": message}
    with pytest.raises(ops.SavepointError, match="says batch 1, but its files"):
        ops.restore(str(sp), str(tmp_path / "restored"), progress=False)
    assert not (tmp_path / "restored").exists()


def test_savepoint_of_a_running_query_is_consistent(spark, tmp_path, tmp_path_factory):
    """Savepoints are taken in a loop while the query runs (slow batches); each one restores
    to a query whose continuation equals the uninterrupted run."""
    case = E.CASES_BY_NAME["agg_update"]
    want = reference(spark, case, tmp_path_factory)
    dirs = E.write_inputs(case, tmp_path)
    ck = tmp_path / "ck"
    taken: list = []
    errors: list = []
    done = threading.Event()

    def take() -> None:
        i = 0
        while not done.is_set():
            try:
                if os.path.exists(ck / "commits" / "0"):
                    taken.append(ops.savepoint(str(ck), str(tmp_path / f"sp{i}"), progress=False))
                    i += 1
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            time.sleep(0.2)

    def slow(df):
        from pyspark.sql import functions as F

        slow_udf = F.udf(lambda k: (time.sleep(0.3), k)[1], "string")
        return case.build(df).withColumn("k", slow_udf("k"))

    thread = threading.Thread(target=take)
    thread.start()
    try:
        from streaming_harness import SPARKSTATE_PROVIDER, run_query

        full = run_query(spark, slow, provider_class=SPARKSTATE_PROVIDER, input_dir=dirs,
                         schema=[s() for s in case.schemas], checkpoint_dir=str(ck), output_mode="update",
                         extra_confs={"spark.sql.shuffle.partitions": "3"})
    finally:
        done.set()
        thread.join()
    assert not errors, errors
    running = [s for s in taken if s.batch_id < max(full.batch_ids)]
    assert running, "no savepoint was taken while the query ran"
    sp = running[len(running) // 2]
    restored = tmp_path / "restored"
    ops.restore(sp.savepoint, str(restored), partitions=2, progress=False)
    cont = run(spark, case, restored, dirs)
    before = type(full)(full.provider_class, {b: r for b, r in full.batches.items() if b <= sp.batch_id})
    assert_equal_to_uninterrupted(case, [before, cont], want, f"savepoint of batch {sp.batch_id} of a running query")


@pytest.mark.s3
def test_storage_options_reach_every_location_and_target_options_the_one_written(checkpoint, tmp_path, s3_location):
    """``--storage-option`` applies to every location a command reads or writes (here a local
    checkpoint, which ignores s3.* options, and a savepoint on S3); ``--target-storage-option``
    gives the location written its own; the former ``--option`` still works and warns."""
    url, options = s3_location
    given = [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]
    out = cli("savepoint", str(checkpoint), f"{url}/sp", "--json", *given)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["savepoint"] == f"{url}/sp" and not out.stderr
    # the savepoint on S3 is read with the same options, the local checkpoint written with them
    ok = cli("restore", f"{url}/sp", str(tmp_path / "r1"), "--json", *given)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["batch_id"] == 2 and (tmp_path / "r1" / "metadata").exists()

    # only the savepoint directory needs options: --target-storage-option, nothing for the checkpoint
    target = [arg for key, value in options.items() for arg in ("--target-storage-option", f"{key}={value}")]
    out = cli("savepoint", str(checkpoint), f"{url}/sp2", "--json", *target)
    assert out.returncode == 0, out.stderr
    # they replace --storage-option's for the savepoint directory: a bad one there fails, naming it
    bad = cli("savepoint", str(checkpoint), f"{url}/sp3", *given, "--target-storage-option", "s3.nope=1")
    assert bad.returncode == 1 and "unknown storage option 's3.nope'" in bad.stderr

    old = [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]
    ok = cli("restore", f"{url}/sp2", str(tmp_path / "r2"), "--json", *old)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.count("warning: --option is deprecated; use --storage-option") == 1
    assert ops.inspect(str(tmp_path / "r2"))["last_committed_batch"] == 2


def test_the_api_names_of_storage_options_and_no_former_name(checkpoint, tmp_path):
    """``storage_options`` reach the savepoint directory too (s3.* options are ignored by a
    local one, an unknown key is refused there); the former ``savepoint_options`` still works for
    one release, warning with the new names."""
    s3 = {"s3.endpoint_url": "http://127.0.0.1:1", "s3.region": "us-east-1"}
    assert ops.savepoint(str(checkpoint), str(tmp_path / "sp"), storage_options=s3, progress=False).batch_id == 2
    with pytest.raises(ConfigError, match="unknown storage option 'nope'"):
        ops.savepoint(str(checkpoint), str(tmp_path / "sp2"), target_storage_options={"nope": "1"}, progress=False)
    with pytest.warns(SparkStateDeprecationWarning,
                      match=r"savepoint\(savepoint_options=\) is deprecated .*; use target_storage_options="):
        with pytest.raises(ConfigError, match="unknown storage option 'nope'"):  # passed on as the new name
            ops.savepoint(str(checkpoint), str(tmp_path / "sp3"), savepoint_options={"nope": "1"}, progress=False)
    with pytest.raises(TypeError, match="both savepoint_options= and target_storage_options="):
        ops.savepoint(str(checkpoint), str(tmp_path / "sp3"), savepoint_options={}, target_storage_options={},
                      progress=False)
    restored = ops.restore(str(tmp_path / "sp"), str(tmp_path / "r"), storage_options=s3, progress=False)
    assert restored.batch_id == 2
    with pytest.warns(SparkStateDeprecationWarning, match=r"use restore\(storage_options=S, target_storage_options=C\)"):
        former = ops.restore(str(tmp_path / "sp"), str(tmp_path / "r2"), savepoint_options=s3, progress=False)
    assert former.batch_id == 2 and ops.inspect(str(tmp_path / "r2"))["last_committed_batch"] == 2


def test_former_flag_names_still_work_and_warn_once(capsys):
    """The flags renamed to the API's argument names keep their former names, hidden, with one
    warning line on stderr."""
    from spark_state.cli import main

    assert main(["read", "/nowhere", "--timers", "--operator", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("warning: --operator is deprecated; use --operator-id") == 1
    assert "give exactly one of STATE or --timers or --operator-state or --operator-id (given: --timers" in err
    assert main(["inspect", "/nowhere", "--no-load", "--option", "retry.attempts=2", "--option", "s3.region=x"]) == 1
    err = capsys.readouterr().err
    assert err.count("warning: --no-load is deprecated; use --no-load-stores") == 1
    assert err.count("warning: --option is deprecated; use --storage-option") == 1
    assert "/nowhere does not exist" in err
    for flag in ("--option", "--operator", "--store", "--no-load"):
        assert flag + " " not in _help(main, "read" if flag in ("--operator", "--store") else "inspect", capsys)


def _help(main, command, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out
