"""One options object for every read of state as data: the rules of what goes with what, and
errors that name each option the way its surface spells it (Python, data source, command line).
Pure: the checks run before any storage is touched."""

from __future__ import annotations

import argparse

import pytest

from spark_state.cli import _parser
from spark_state.state_data.datasource.options import OPTIONS
from spark_state.state_data.errors import StateDataError
from spark_state.state_data.read_options import CLI, PYTHON, SOURCE, SPELLINGS, OptionError, ReadOptions, spelled


def _cli(*argv: str) -> argparse.Namespace:
    return _parser("spark-state").parse_args(["read", *argv])


def test_every_option_has_a_spelling_on_every_surface_and_the_data_source_lists_its_own():
    fields = {f.name for f in ReadOptions.__dataclass_fields__.values()} - {"surface"}
    assert set(SPELLINGS) == fields | {"target"}  # target: the data source writer's (write_options)
    assert OPTIONS[:2] == ("path", "stateVarName") and "operatorId" not in OPTIONS and "batchId" in OPTIONS
    assert [spelled("batch", s) for s in (PYTHON, SOURCE, CLI)] == ["batch=", "batchId", "--batch"]
    assert spelled("operator_id", SOURCE) == "operatorId"  # the writer's; the reader refuses it
    assert spelled("process_locations", SOURCE) == "process_locations="  # no such option: Python's name


@pytest.mark.parametrize("surface, expected", [(PYTHON, "start_batch="), (SOURCE, "changeStartBatchId"),
                                               (CLI, "--start-batch")])
def test_an_option_error_names_the_option_as_its_surface_spells_it(surface, expected):
    error = OptionError("start_batch", "a change feed needs {option}")
    assert isinstance(error, StateDataError) and str(error) == "a change feed needs start_batch="
    assert str(error.on(surface)) == f"a change feed needs {expected}"
    with pytest.raises(OptionError, match=f"needs {expected}"):
        ReadOptions("/ckpt", state="count", change_feed=True, surface=surface).check()


def test_an_option_error_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(OptionError("batch", "omit {option}", SOURCE)))
    assert (str(error), error.option, str(error.on(CLI))) == ("omit batchId", "batch", "omit --batch")


def test_the_data_source_options_are_matched_without_case_and_typed():
    read = ReadOptions.from_source({"path": "/ckpt", "STATEVARNAME": "count", "batchid": " 3 ",
                                    "flattenCollectionTypes": "no", "allowPickle": "1", "s3.region": "eu"})
    assert (read.state, read.batch, read.flatten_collection_types, read.allow_pickle) == ("count", 3, False, True)
    assert read.storage_options == {"s3.region": "eu"} and read.surface == SOURCE
    with pytest.raises(OptionError, match="needs the checkpoint or savepoint directory: .load\\(path\\) or the path"):
        ReadOptions.from_source({"stateVarName": "count"})
    with pytest.raises(StateDataError, match="did you mean 'changeEndBatchId'"):
        ReadOptions.from_source({"path": "/p", "changeEndBatch": "2"})


def test_the_command_lines_arguments_become_the_same_options():
    read = ReadOptions.from_cli(_cli("/ckpt", "count", "--start-batch", "2", "--function", "F"), {}, {})
    assert read.check() == ReadOptions("/ckpt", state="count", function="F", change_feed=True, start_batch=2,
                                       surface=CLI)
    read = ReadOptions.from_cli(_cli("/ckpt", "split", "--operator-state"), {"s3.region": "eu"}, {})
    assert (read.operator_state, read.storage_options) == ("split", {"s3.region": "eu"})
    read.check()


@pytest.mark.parametrize("options, message", [
    ({}, r"give exactly one of state or read_timers\(\) or read_function_operator_state\(\) or operator_id= "
         r"\(given: none\)"),
    ({"state": "a", "timers": True}, r"\(given: state, read_timers\(\)\)"),
    ({"timers": True, "store_name": "left"}, "store_name= names a store of a Spark operator: give operator_id="),
    ({"state": "a", "change_feed": True, "start_batch": 1, "batch": 2}, "give end_batch=, not batch="),
    ({"state": "a", "end_batch": 2}, "end_batch= goes with a change feed"),
    ({"timers": True, "flatten_collection_types": False}, "flatten_collection_types= applies to keyed state"),
    ({"state": "a", "change_feed": True, "start_batch": 0, "flatten_collection_types": True},
     "a change feed's row holds the whole list or map"),
])
def test_what_does_not_go_together_is_refused_before_anything_is_read(options, message):
    with pytest.raises(OptionError, match=message):
        ReadOptions("/nowhere", **options).check()
    ReadOptions("/nowhere", state="a", change_feed=True, start_batch=0, flatten_collection_types=False).check()
