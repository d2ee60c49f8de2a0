"""Point lookups (spark_state.state_data.readers.lookup) against a plain-Python model: an absent key of a
list or map state is not found and has no value (Python and ``spark-state get --json``); a key
of the wrong number of values says how many the key columns take; an unknown function's error
lists only the places searched; the function chooser's errors read alike for a checkpoint and a
savepoint; lookups on a savepoint equal those on the checkpoint it was taken from."""

from __future__ import annotations

import json
import os
import random

import pytest

import process_fns
import state_data_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, all_states_add
from spark_state.__main__ import main
from spark_state.ops import savepoint
from spark_state.ops.checkpoint_reader import SparkCheckpoint
from spark_state.ops.process_locations import where_looked
from spark_state.process import keyed_process
from spark_state.process import location as L
from spark_state.process.errors import StateLocationError
from spark_state.state_data import KeyMismatchError, StateDataError, StateLookup, UnknownStateError, lookup
from spark_state.state_data.key_columns import KeyColumns
from spark_state.state_data.location.savepoints import SavepointSource
from spark_state.storage import open_storage
from state_data_fns import AllStatesAndTimers
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

NAME = "AllStates"


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(5)
    return [[(f"k{rng.randrange(20)}", rng.randrange(0, 25)) for _ in range(40)] for _ in range(3)]


def _model(batches) -> dict:
    state: dict = {}
    for rows in batches:
        for k, v in rows:
            all_states_add(state, k, v)
    return state


@pytest.fixture(scope="module")
def query(spark, tmp_path_factory):
    """A finished query's checkpoint (state beside it) and a savepoint of its last batch."""
    ship_module_by_value(process_fns)
    ship_module_by_value(state_data_fns)
    tmp = tmp_path_factory.mktemp("lookups")
    batches = _batches()
    write_batches(tmp / "in", batches, INPUT_SCHEMA)
    run = run_query(spark, lambda df: keyed_process(df, "k", AllStatesAndTimers(), ALL_STATES_OUTPUT, parallelism=3,
                                                    name=NAME),
                    provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"), schema=INPUT_SCHEMA,
                    checkpoint_dir=str(tmp / "ckpt"), output_mode="append")
    assert run.batch_ids == [0, 1, 2]
    savepoint(str(tmp / "ckpt"), str(tmp / "sp"), progress=False)
    return {"checkpoint": str(tmp / "ckpt"), "savepoint": str(tmp / "sp"), "model": _model(batches), "tmp": tmp}


# ---------------------------------------------------------------------------- keys (no Spark)
def test_a_key_of_the_wrong_number_of_values_says_how_many_are_expected():
    one = KeyColumns(("user",), ("string",))
    assert one.values("alice") == ("alice",) == one.values(("alice",)) == one.values(["alice"])
    with pytest.raises(KeyMismatchError, match=r"one key value expected for the key column user string, "
                                               r"got 2 values: \('alice', 'bob'\)"):
        one.values(("alice", "bob"))
    two = KeyColumns(("region", "id"), ("string", "int"))
    with pytest.raises(KeyMismatchError, match=r"2 key values expected for the key columns \(region string, id int\), "
                                               r"got 3: \('eu', 1, 2\)"):
        two.values(("eu", 1, 2))
    with pytest.raises(KeyMismatchError, match=r"2 key values expected .* got one value: 'eu'"):
        two.values("eu")


def test_an_unreadable_operator_record_names_the_file(tmp_path):
    storage = open_storage(str(tmp_path))
    with pytest.raises(StateLocationError, match=r"_operator.json cannot be read .* the state location of"):
        L.read_meta(storage)
    storage.write_bytes(L.META_FILE, b"[1]")
    with pytest.raises(StateLocationError, match="a JSON object expected, got list"):
        L.read_meta(storage)


# ---------------------------------------------------------------------------- lookups
def test_an_absent_key_of_a_list_or_map_state_has_no_value(query, capsys):
    with StateLookup(query["checkpoint"]) as states:
        for state in ("recent", "buckets", "count"):
            result = states.lookup(state, "no-such-key")
            assert (result.found, result.value) == (False, None), state
        assert states.get("recent", "no-such-key", "absent") == "absent"
        assert states.lookup("recent", "k1").value == query["model"]["k1"]["recent"]
    assert main(["get", query["checkpoint"], "buckets", "no-such-key", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["found"] is False and out["value"] is None


def test_a_two_value_key_for_one_key_column_is_refused(query):
    with pytest.raises(KeyMismatchError, match=r"one key value expected for the key column k string"):
        lookup(query["checkpoint"], "count", ("k1", "k2"))


def test_an_unknown_function_lists_only_the_places_searched(query, tmp_path, monkeypatch):
    """A ``./spark-state`` of the working directory holding no directory of this query was not
    searched for it, and is not named."""
    monkeypatch.chdir(tmp_path)
    os.mkdir(tmp_path / "spark-state")
    with pytest.raises(UnknownStateError) as raised:
        lookup(query["checkpoint"], "count", "k1", function="Other")
    message = str(raised.value)
    assert "no keyed function named 'Other' (keyed functions found: AllStates; looked beside the checkpoint" in message
    assert str(tmp_path) not in message and "former default" not in message
    ckpt = SparkCheckpoint(query["checkpoint"])
    assert "former default" not in where_looked(ckpt.storage, ckpt.query_id(), None)
    os.makedirs(tmp_path / "spark-state" / ckpt.query_id())  # now it is searched, and named
    assert f"{tmp_path}/spark-state/{ckpt.query_id()}/<name>" in where_looked(ckpt.storage, ckpt.query_id(), None)


def test_erase_of_an_unknown_function_names_the_locations_it_was_given(query):
    """erase_keys hands its process_locations to the chooser: the error lists them among the
    places searched (nothing is erased)."""
    from spark_state.ops.process_locations import beside_checkpoint
    from spark_state.state_data import erase_keys

    ckpt = SparkCheckpoint(query["checkpoint"])
    where = f"{beside_checkpoint(ckpt.storage).url}/{NAME}"
    with pytest.raises(UnknownStateError, match=r"no keyed function named 'Other' \(keyed functions found: AllStates; "
                                                r"looked the locations named \(AllStates=\S+/AllStates\)"):
        erase_keys(query["checkpoint"], ["k1"], function="Other", process_locations={NAME: where}, progress=False)


def test_the_chooser_reads_alike_for_a_checkpoint_and_a_savepoint(query):
    for path in (query["checkpoint"], query["savepoint"]):
        with pytest.raises(UnknownStateError, match=r"has no keyed function named 'Other' \(keyed functions found: "
                                                    r"AllStates"):
            lookup(path, "count", "k1", function="Other")
    assert SavepointSource.open(query["savepoint"]).function == NAME


# ---------------------------------------------------------------------------- lookups on a savepoint
def test_lookups_on_a_savepoint_equal_those_on_its_checkpoint(query, capsys):
    model = query["model"]
    with StateLookup(query["checkpoint"]) as ckpt, StateLookup(query["savepoint"]) as sp:
        assert sp.savepoint is not None and sp.location is None and sp.function == NAME
        assert sp.states() == ckpt.states()
        for key in sorted(model) + ["no-such-key"]:
            for state in ("count", "recent", "buckets", "total", "mean"):
                a, b = ckpt.lookup(state, key), sp.lookup(state, key)
                assert (b.found, b.value, b.kind, b.batch, b.key_group) == (a.found, a.value, a.kind, 2, a.key_group)
            if key in model:
                assert sp.get("count", key) == model[key]["count"] and sp.get("recent", key) == model[key]["recent"]
        assert sp.lookup("count", "k1", batch=2).found
        with pytest.raises(StateDataError, match=r"holds the state of batch 2 only, not of batch 1: omit batch"):
            sp.lookup("count", "k1", batch=1)
        with pytest.raises(UnknownStateError, match=r"no keyed state 'cont' \(states: buckets, count, mean"):
            sp.lookup("cont", "k1")
    assert lookup(query["savepoint"], "total", "k1").value == model["k1"]["total"]
    assert main(["get", query["savepoint"], "recent", "k1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["found"] and out["value"] == model["k1"]["recent"] and out["batch"] == 2
    assert main(["get", query["savepoint"], "recent", "k1", "--batch", "0", "--json"]) == 1
    assert "holds the state of batch 2 only" in capsys.readouterr().err


def test_a_savepoint_lookup_loads_only_the_keys_partition(query, tmp_path):
    """With every other partition's state file deleted, the key's lookups still work (a deleted
    file would fail its manifest check if it were read)."""
    import shutil
    copy = tmp_path / "sp"
    shutil.copytree(query["savepoint"], copy)
    first = lookup(str(copy), "count", "k1")
    state_dir = copy / "process" / NAME
    for name in os.listdir(state_dir):
        if name.endswith(".arrow") and name != f"{first.partition}.arrow":
            os.remove(state_dir / name)
    assert lookup(str(copy), "count", "k1").value == query["model"]["k1"]["count"]
