"""Renamed public names keep their former spelling for one release, warning with the new name;
``register_data_sources`` is beside ``configure``; a path that does not exist says so."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import spark_state
from spark_state.deprecation import SparkStateDeprecationWarning, renamed_arguments
from spark_state.ops.checkpoint_reader import SparkCheckpoint
from spark_state.ops.errors import NotACheckpointError


def test_a_renamed_argument_warns_and_reaches_the_new_name():
    @renamed_arguments(old_name="new_name")
    def f(*, new_name: int = 0) -> int:
        return new_name

    with pytest.warns(SparkStateDeprecationWarning, match=r"f\(old_name=\) is deprecated .*; use new_name="):
        assert f(old_name=7) == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(new_name=3) == 3
    with pytest.raises(TypeError, match="both old_name= and new_name="):
        f(old_name=1, new_name=2)


def test_the_readers_former_argument_names_are_deprecated_aliases(tmp_path):
    """The readers take their former argument names with a warning and pass them on: the call
    gets as far as the path, which does not exist (a name the reader does not take would be a
    TypeError before that)."""
    from spark_state.state_data import read_keyed_state, read_spark_operator_state
    from spark_state.state_data.writers.transform import SavepointTransform

    missing = str(tmp_path / "nope")
    with pytest.warns(SparkStateDeprecationWarning, match=r"read_keyed_state\(exploded=\).*flatten_collection_types="):
        with pytest.raises(NotACheckpointError, match="does not exist"):
            read_keyed_state(None, missing, "count", exploded=True)  # type: ignore[arg-type]
    with pytest.warns(SparkStateDeprecationWarning, match=r"read_spark_operator_state\(savepoint_options=\).*storage_options="):
        with pytest.raises(NotACheckpointError, match="does not exist"):
            read_spark_operator_state(None, missing, savepoint_options={})  # type: ignore[arg-type]
    # the transform's write needs a savepoint and a session: its alias is the decorator's alone
    assert "storage_options" not in SavepointTransform.write.__wrapped__.__code__.co_varnames


def test_read_operator_state_is_the_former_name_of_read_spark_operator_state():
    import spark_state.state_data as state_data

    with pytest.warns(SparkStateDeprecationWarning, match=r"read_operator_state is deprecated.*read_spark_operator_state"):
        former = state_data.read_operator_state
    assert former is state_data.read_spark_operator_state
    with pytest.warns(SparkStateDeprecationWarning):
        from spark_state.state_data import read_operator_state  # noqa: F401


def test_spark_state_processor_is_the_renamed_module_and_warns():
    """In a fresh interpreter (a module is imported once per process): the old package and its
    modules are the new ones, the same objects, each import warning with the new name."""
    code = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import spark_state.processor as old
    from spark_state.processor.read import read_keyed_state
    from spark_state.processor.keys import KeyColumns
    from spark_state.state_data.operators import read_spark_operator_state
import spark_state.state_data as new
from spark_state.state_data import key_columns
from spark_state.state_data.readers import keyed_state, spark_operator_state
assert old is new and read_keyed_state is keyed_state.read_keyed_state and KeyColumns is key_columns.KeyColumns
assert read_spark_operator_state is spark_operator_state.read_spark_operator_state
print("|".join(str(w.message) for w in caught))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    said = out.stdout.strip().split("|")
    assert said == ["spark_state.processor is deprecated and goes in the next release; use spark_state.state_data",
                    "spark_state.processor.read is deprecated and goes in the next release; use "
                    "spark_state.state_data.readers.keyed_state",
                    "spark_state.processor.keys is deprecated and goes in the next release; use "
                    "spark_state.state_data.key_columns",
                    "spark_state.state_data.operators is deprecated and goes in the next release; use "
                    "spark_state.state_data.readers.spark_operator_state"]


def test_register_data_sources_is_beside_configure():
    from spark_state.state_data import register_data_sources

    assert spark_state.register_data_sources is register_data_sources
    assert "register_data_sources" in spark_state.__all__ and "configure" in spark_state.__all__


def test_a_path_that_does_not_exist_is_reported_as_such(tmp_path):
    with pytest.raises(NotACheckpointError, match=f"^{tmp_path / 'nope'} does not exist: pass the query's "
                                                  "checkpointLocation$"):
        SparkCheckpoint(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotACheckpointError, match="is not a Spark streaming checkpoint: it has no 'metadata'"):
        SparkCheckpoint(str(tmp_path / "empty"))


@pytest.mark.s3
def test_a_prefix_with_nothing_under_it_does_not_exist(s3_location):
    url, options = s3_location
    with pytest.raises(NotACheckpointError, match="/nope does not exist"):
        SparkCheckpoint(f"{url}/nope", options)
    from spark_state.storage import open_storage

    open_storage(url, options).write_bytes("other/file", b"x")
    with pytest.raises(NotACheckpointError, match="is not a Spark streaming checkpoint"):
        SparkCheckpoint(url, options)
