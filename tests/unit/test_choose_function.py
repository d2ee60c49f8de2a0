"""The one chooser of "which function" of every reader: its errors name what there is and how
to choose, with the argument, the data source's option and the command's flag."""

from __future__ import annotations

from collections import namedtuple

import pytest

from spark_state.state_data import UnknownStateError
from spark_state.state_data.location.functions import choose_function

Fn = namedtuple("Fn", "name")


def test_the_only_function_or_the_one_named():
    assert choose_function([Fn("A")], None, "the query of /ckpt") == Fn("A")
    assert choose_function([Fn("A"), Fn("B")], "B", "the query of /ckpt") == Fn("B")


def test_several_functions_and_none_named_say_how_to_name_one():
    with pytest.raises(UnknownStateError, match=r"the query of /ckpt has several keyed functions \(A, B\): name one "
                                                r"with function= \(the data source's functionName, --function NAME\)"):
        choose_function([Fn("A"), Fn("B")], None, "the query of /ckpt")


def test_an_unknown_function_lists_the_functions_found():
    with pytest.raises(UnknownStateError, match=r"has no keyed function named 'C' \(keyed functions found: A, B\)"):
        choose_function([Fn("A"), Fn("B")], "C", "the savepoint /sp")
