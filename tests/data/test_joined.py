"""Clients that lie back to back in one array are joined as a view; anything else is left to a copy."""

from __future__ import annotations

import torch

from fedsim.data.base import joined


def test_back_to_back_slices_join_into_a_view_of_their_array() -> None:
    array = torch.arange(30.0).view(10, 3)
    view = joined([array[0:2], array[2:5], array[5:9]])
    assert view is not None
    assert torch.equal(view, array[0:9])
    assert view.data_ptr() == array.data_ptr()  # no copy
    single = joined([array[4:7]])
    assert single is not None and torch.equal(single, array[4:7])


def test_a_gap_another_order_another_array_or_a_strided_slice_is_not_joined() -> None:
    array = torch.arange(30.0).view(10, 3)
    assert joined([array[0:2], array[3:5]]) is None  # a gap
    assert joined([array[2:5], array[0:2]]) is None  # out of order
    assert joined([array[0:2], torch.arange(9.0).view(3, 3)]) is None  # another storage
    assert joined([array[0:4:2], array[4:6]]) is None  # every other row: not contiguous
    assert joined([array[:, :2][0:2], array[:, :2][2:4]]) is None  # column slices: rows are not adjacent
