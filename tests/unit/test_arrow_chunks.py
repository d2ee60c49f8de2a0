"""spark_state.arrow_chunks: the one helper that cuts rows and entries into bounded chunks."""

from __future__ import annotations

import gc
import weakref

import pyarrow as pa
import pytest

from spark_state.arrow_chunks import chunks, entry_arrays, entry_batch, entry_batches, entry_size

SCHEMA = pa.schema([pa.field("key", pa.binary(), nullable=False), pa.field("value", pa.binary(), nullable=False)])


def test_chunks_by_rows_keep_order_and_the_last_partial_chunk() -> None:
    assert list(chunks(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(chunks(range(6), 3)) == [[0, 1, 2], [3, 4, 5]]  # no empty chunk after a full one
    assert list(chunks([], 3)) == []
    assert list(chunks([], 3, at_least_one=True)) == [[]]
    assert list(chunks(range(3), 3, at_least_one=True)) == [[0, 1, 2]]  # not an extra empty one


def test_chunks_by_bytes_end_at_the_item_that_reaches_the_bound() -> None:
    items = [b"a" * 4, b"b" * 4, b"c" * 1, b"d" * 10, b"e"]
    assert list(chunks(items, 100, max_bytes=8, size=len)) == [[b"aaaa", b"bbbb"], [b"c", b"d" * 10], [b"e"]]
    # the row bound still holds under the byte bound
    assert list(chunks(items, 1, max_bytes=1000, size=len)) == [[i] for i in items]


def test_chunks_refuse_bad_bounds() -> None:
    with pytest.raises(ValueError, match="rows must be at least 1, got 0"):
        list(chunks([1], 0))
    with pytest.raises(ValueError, match="max_bytes needs size"):
        list(chunks([1], 1, max_bytes=10))


def test_a_chunk_handed_out_is_not_held_by_the_generator() -> None:
    class Item:
        pass

    gen = chunks((Item() for _ in range(4)), 2)
    first = next(gen)
    refs = [weakref.ref(item) for item in first]
    del first
    gc.collect()
    assert [r() for r in refs] == [None, None]  # the suspended generator keeps no reference to the chunk
    assert len(next(gen)) == 2


def test_entries_as_record_batches_of_the_schema() -> None:
    entries = [(bytes([i]), b"v" * i) for i in range(5)]
    batches = list(entry_batches(entries, SCHEMA, 2))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert all(b.schema.equals(SCHEMA) for b in batches)
    got = [(k, v) for b in batches for k, v in zip(b.column(0).to_pylist(), b.column(1).to_pylist())]
    assert got == entries
    assert [b.num_rows for b in entry_batches(entries, SCHEMA, 100, max_bytes=5)] == [3, 2]  # 1 + 2 + 3 reaches 5
    assert [b.num_rows for b in entry_batches([], SCHEMA, 2, at_least_one=True)] == [0]


def test_entry_arrays_and_sizes_take_deletes() -> None:
    keys, values = entry_arrays([(b"k", None), (b"l", b"xy")])
    assert keys.to_pylist() == [b"k", b"l"] and values.to_pylist() == [None, b"xy"]
    assert keys.type == pa.binary() and values.type == pa.binary()
    assert entry_size((b"k", None)) == 1 and entry_size((b"kk", b"vvv")) == 5
    assert entry_batch([(b"k", b"v")], SCHEMA).to_pylist() == [{"key": b"k", "value": b"v"}]


@pytest.mark.parametrize("n", [0, 1, 4, 5, 9])
@pytest.mark.parametrize("at_least_one", [False, True])
def test_a_list_is_sliced_into_the_chunks_an_iterator_gives(n, at_least_one):
    """Lists take the slicing path (no Python step per item); its chunks are the iterator path's."""
    items = list(range(n))
    assert list(chunks(items, 4, at_least_one=at_least_one)) == list(chunks(iter(items), 4, at_least_one=at_least_one))
