"""The page of the log as one value (services/store/_page.pyx): its split into pairs."""

from __future__ import annotations

import struct

import pytest

from esched.services.store._page import split_page


def _page(rows: list[tuple[int, bytes]]) -> bytes:
    # As PAGE_SQL builds it: int8send(position) || int4send(length) || payload, per row.
    return b"".join(struct.pack(">qI", pos, len(p)) + p for pos, p in rows)


def test_a_page_splits_into_its_pairs_in_order() -> None:
    rows = [(5, b'{"a":1}'), (6, b""), (7, bytes(range(256))), (2**40, b"x" * 70_000)]
    assert split_page(_page(rows)) == rows
    assert split_page(bytearray(_page(rows))) == rows
    assert split_page(memoryview(_page(rows))) == rows


def test_an_empty_page_is_no_pairs() -> None:
    # string_agg over no rows is NULL
    assert split_page(None) == []
    assert split_page(b"") == []


def test_rows_out_of_position_order_are_sorted() -> None:
    rows = [(9, b"c"), (7, b"a"), (8, b"b")]
    assert split_page(_page(rows)) == sorted(rows)


def test_a_repeated_position_is_refused() -> None:
    with pytest.raises(ValueError, match="repeats position 7"):
        split_page(_page([(8, b"b"), (7, b"a"), (7, b"a")]))


@pytest.mark.parametrize("cut", [1, 11, 12, 13, 19])
def test_a_page_cut_short_is_refused(cut: int) -> None:
    whole = _page([(1, b"abcdefgh"), (2, b"ijklmnop")])
    with pytest.raises(ValueError, match="cut short"):
        split_page(whole[:-cut])
