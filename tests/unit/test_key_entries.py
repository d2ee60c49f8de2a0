"""spark_state.keys.entries: which keyed state and which key own each kind of entry of a keyed
function's store (pure Python, no Spark)."""

from __future__ import annotations

import pytest

from spark_state.keys import entries as E
from spark_state.keys import keyed as K
from spark_state.keys import operator as O
from spark_state.keys import system as S
from spark_state.keys import timers as T

KEY = b"\x01alice"
OTHER_KEY = b"\x01bob"


def _samples() -> dict[str, bytes]:
    counter = K.entry_key(7, b"recent", KEY)
    return {
        "value": K.entry_key(3, b"count", KEY),
        "list element": K.entry_key(7, b"recent", KEY, K.seq_suffix(2)),
        "list counter": counter,
        "map entry": K.entry_key(9, b"buckets", OTHER_KEY, b"\x00\x00\x00\x05"),
        "timer": T.timer_key(3, T.EVENT_TIME, 1_000, KEY),
        "ttl index": S.index_key(b"recent", 60_000, counter),
        "ttl index of a timer": S.index_key(b"recent", 60_000, T.timer_key(3, T.EVENT_TIME, 5, KEY)),
        "ttl marker": S.marker_key(b"recent"),
        "schema record": S.keyed_record_key(b"count"),
        "operator schema record": S.operator_record_key(b"count"),
        "operator state": O.KEYED_OPERATOR_PREFIX + O.state_prefix(O.MODE_SPLIT, "count") + O.index_suffix(0),
    }


@pytest.mark.parametrize("what, kind, state, key", [
    ("value", E.STATE, b"count", KEY),
    ("list element", E.STATE, b"recent", KEY),
    ("list counter", E.STATE, b"recent", KEY),
    ("map entry", E.STATE, b"buckets", OTHER_KEY),
    ("timer", E.TIMERS, T.TIMER_STATE_NAME, KEY),
    ("ttl index", E.TTL_INDEX, b"recent", KEY),
    ("ttl index of a timer", E.TTL_INDEX, b"recent", None),
    ("ttl marker", E.TTL_MARKER, b"recent", None),
    ("schema record", E.SCHEMA_RECORD, b"count", None),
    ("operator schema record", E.OTHER, None, None),
    ("operator state", E.OTHER, None, None),
])
def test_every_layout_has_its_owner(what, kind, state, key):
    assert E.owner_of(_samples()[what]) == E.EntryOwner(kind, state, key)


def test_a_states_entries_are_its_data_record_marker_and_index():
    samples = _samples()
    for name in (b"count", b"recent", b"buckets", b"other", T.TIMER_STATE_NAME):
        mine = {what for what, entry in samples.items() if E.is_entry_of_state(entry, name)}
        # the fast check agrees with the owner everywhere
        assert mine == {what for what, entry in samples.items()
                        if E.owner_of(entry).kind != E.OTHER and E.owner_of(entry).state == name}, name
    assert {w for w, e in samples.items() if E.is_entry_of_state(e, b"recent")} == {
        "list element", "list counter", "ttl index", "ttl index of a timer", "ttl marker"}
    assert {w for w, e in samples.items() if E.is_entry_of_state(e, b"count")} == {"value", "schema record"}


def test_a_state_name_that_prefixes_another_is_not_its_owner():
    assert not E.is_entry_of_state(K.entry_key(1, b"counts", KEY), b"count")
    assert not E.is_entry_of_state(S.keyed_record_key(b"counts"), b"count")
    assert E.owner_of(K.entry_key(1, b"counts", KEY)).state == b"counts"
