"""Static metadata a trace carries, as the predictor's feature columns."""
from __future__ import annotations

import numpy as np
import pytest

from lcr.errors import LcrInputError
from lcr.traces import Trace
from lcr.traces.static import static_columns, static_fields


def test_tokens_from_root_counts_the_blocks_before_each_block_of_its_prompt():
    trace = Trace(np.arange(6), request_offsets=np.array([0, 3, 4, 6]), meta={"block_tokens": 16})
    assert static_fields(trace) == ("tokens_from_root",)
    assert static_columns(trace, ("tokens_from_root",))[:, 0].tolist() == [0, 16, 32, 0, 0, 16]
    cut = trace.head(5)  # cut inside the last prompt
    assert static_columns(cut, ("tokens_from_root",))[:, 0].tolist() == [0, 16, 32, 0, 0]


def test_columns_follow_the_names_and_head_cuts_every_array():
    trace = Trace(np.arange(4), sizes=np.array([512, 4096, 512, 8]), tables=np.array([2, 0, 1, 2]))
    assert static_fields(trace) == ("table", "size")
    assert static_columns(trace, ("size", "table")).tolist() == [[512, 2], [4096, 0], [512, 1], [8, 2]]
    assert static_columns(trace.head(2), ("table",))[:, 0].tolist() == [2, 0]


def test_a_field_the_trace_lacks_is_named():
    with pytest.raises(LcrInputError, match="static field 'table'.*has: size"):
        static_columns(Trace(np.arange(3), sizes=np.ones(3)), ("table",))
