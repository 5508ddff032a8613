"""The core's typedefs match the numpy dtypes its tables use."""

import numpy as np

from esched.core import ClusterState
from esched.core._types import type_info


def test_typedefs_have_the_sizes_and_signs_the_tables_assume():
    info = type_info()
    assert info["units_t"] == (np.dtype(np.int64).itemsize, True)
    assert info["index_t"] == (np.dtype(np.int32).itemsize, True)
    assert info["word_t"] == (np.dtype(np.uint64).itemsize, False)
    assert info["score_t"] == (8, True)
    assert info["flag_t"] == (np.dtype(np.uint8).itemsize, False)
    assert info["phase_t"] == (np.dtype(np.int8).itemsize, True)


def test_state_tables_use_those_dtypes():
    tables = ClusterState().tables()
    assert tables["allocatable"].dtype == np.int64
    assert tables["allocated"].dtype == np.int64
    assert tables["pod_node"].dtype == np.int32
    assert tables["label_bits"].dtype == np.uint64
    assert tables["flags"].dtype == np.uint8
    assert tables["pod_phase"].dtype == np.int8
