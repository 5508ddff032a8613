"""Scoring kernels on explicit vectors: kube's broken-linear table, exact division, E-PVM, Mixed."""

from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esched.core.scoring._py_kernels import (
    _py_broken_linear,
    _py_div_by_cap,
    _py_epvm,
    _py_floor_div,
    _py_kernel_and_inv,
    _py_mixed,
    _py_round_half_away,
)

# kube TestBrokenLinearFunction (requested_to_capacity_ratio_test.go)
BROKEN_LINEAR = [
    (
        [(10, 1), (90, 9)],
        [
            (-10, 1),
            (0, 1),
            (9, 1),
            (10, 1),
            (15, 1),
            (19, 1),
            (20, 2),
            (89, 8),
            (90, 9),
            (99, 9),
            (100, 9),
            (110, 9),
        ],
    ),
    (
        [(0, 2), (40, 10), (100, 0)],
        [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)],
    ),
    (
        [(0, 2), (40, 2), (100, 2)],
        [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)],
    ),
]


@pytest.mark.parametrize(("points", "assertions"), BROKEN_LINEAR)
def test_broken_linear_function_matches_kube(points, assertions):
    for p, expected in assertions:
        assert _py_broken_linear(p, points) == expected, p


@given(st.integers(0, 2**62), st.integers(1, 2**62))
def test_floor_div_is_exact_integer_division(a, b):
    assert _py_floor_div(a, b) == a // b


@given(st.integers(0, 2**40), st.integers(1, 2**20))
def test_floor_div_is_exact_near_integer_quotients(q, b):
    for a in (q * b - 1, q * b, q * b + 1):
        if a >= 0:
            assert _py_floor_div(a, b) == a // b


def test_epvm_prefers_the_less_loaded_node_and_spans_0_to_100():
    empty = _py_epvm([0, 0], [1000, 2**30], [8000, 8 * 2**30], [1, 1], 16.0)
    busy = _py_epvm([6000, 6 * 2**30], [1000, 2**30], [8000, 8 * 2**30], [1, 1], 16.0)
    assert 0 <= busy < empty <= 100
    assert _py_epvm([0], [0], [10], [1], 16.0) == 100  # nothing added: no cost
    assert _py_epvm([0], [10], [10], [1], 16.0) == 0  # 0 -> full: the whole range


def test_mixed_packs_batch_spreads_production():
    # two nodes, requested after placement: 75% vs 25% used
    full, empty = [750, 750], [250, 250]
    alloc, w = [1000, 1000], [1, 1]
    assert _py_mixed(full, alloc, w, False, 50, 1000) > _py_mixed(empty, alloc, w, False, 50, 1000)
    assert _py_mixed(full, alloc, w, True, 50, 1000) < _py_mixed(empty, alloc, w, True, 50, 1000)


def test_mixed_penalizes_stranding():
    alloc, w = [1000, 1000], [1, 1]
    # cpu exhausted (99%) while memory is 80% free: base MostAllocated 59, strand 0.8 -> 59 - 47
    stranded = _py_mixed([990, 200], alloc, w, False, 50, 1000)
    assert stranded == 59 - 59 * 790 * 1000 // 1000000
    # balanced use scores its plain MostAllocated
    assert _py_mixed([600, 600], alloc, w, False, 50, 1000) == 60
    # penalty weight 0 turns the penalty off
    assert _py_mixed([990, 200], alloc, w, False, 50, 0) == 59


@given(st.integers(1, 2**27), st.integers(1, 2**27), st.integers(-3, 3))
def test_floor_div_is_exact_at_the_double_path_limit(q, b, d):
    # The double path (a, b < 2**52) has no correction step; quotients near integers
    # with a and b close to 2**52 are where a rounding error would show.
    a = q * b + d
    if 0 <= a < 2**52:
        assert _py_floor_div(a, b) == a // b
    for a in (2**52 - 1, 2**52 - b, 2**52 - 1 - (2**52 - 1) % b):
        assert _py_floor_div(a, b) == a // b
        assert _py_floor_div(a, 2**52 - 1 - b) == a // (2**52 - 1 - b)


@given(st.integers(0, 2**52 - 1), st.integers(1, 2**52 - 1))
def test_reciprocal_division_is_exact(a, b):
    # the reciprocal variants' division (kernels' quotients are <= 100, but the
    # correction makes any quotient below 2**52 exact)
    assert _py_div_by_cap(a, b) == a // b


@given(st.integers(1, 2**46), st.integers(0, 100), st.integers(-1, 1))
def test_reciprocal_division_is_exact_near_integer_quotients(b, q, d):
    a = q * b + d
    if a >= 0:
        assert _py_div_by_cap(a, b) == a // b


_CAP = st.integers(0, 2**46)


@pytest.mark.parametrize("kind", ["LeastAllocated", "MostAllocated", "BalancedAllocation"])
@given(st.lists(st.tuples(st.integers(0, 2**46), _CAP, st.integers(1, 5)), min_size=1, max_size=4))
def test_reciprocal_kernel_variants_score_as_the_kernels(kind, vectors):
    # the few-stale rescoring of the cache uses the reciprocal variants: same integers
    requested, allocatable, weights = (list(v) for v in zip(*vectors, strict=True))
    exact, by_inverse = _py_kernel_and_inv(kind, requested, allocatable, weights)
    assert by_inverse == exact


_SHARE_EXACT = (2**63 - 1) // 100


def _kube_fit(
    kind: str, requested: list[int], allocatable: list[int], weights: list[int], *, wide: bool
) -> int:
    """kube-scheduler's mostResourceScorer / leastResourceScorer
    (pkg/scheduler/framework/plugins/noderesources/most_allocated.go,
    least_allocated.go) in exact integers: requested above capacity capped (Most) or
    scored 0 (Least); a resource the node has none of left out (resource_allocation.go).
    ``wide``: a share whose part * 100 is beyond int64 taken as esched takes it, of
    the two without their low byte (kube's int64 product overflows there)."""
    node = weight_sum = 0
    for r, a, w in zip(requested, allocatable, weights, strict=True):
        if a == 0:
            continue
        part = min(r, a) if kind == "MostAllocated" else (a - r if r <= a else 0)
        if wide and part > _SHARE_EXACT:
            node += (part >> 8) * 100 // (a >> 8) * w
        else:
            node += part * 100 // a * w
        weight_sum += w
    return node // weight_sum if weight_sum else 0


# Quantities go up to 2**62 base units (schemas.quantity.MAX_BASE_UNITS); above
# (2**63 - 1) // 100 a 64-bit requested * 100 overflows.
_ANY_UNITS = st.integers(0, 2**62) | st.sampled_from([0, 1, 2**62, _SHARE_EXACT, 10**17])


@pytest.mark.parametrize("kind", ["LeastAllocated", "MostAllocated", "BalancedAllocation"])
@given(st.lists(st.tuples(_ANY_UNITS, _ANY_UNITS, st.integers(1, 100)), min_size=1, max_size=4))
def test_allocation_scores_stay_within_the_node_score_range_for_any_quantity(kind, vectors):
    requested, allocatable, weights = (list(v) for v in zip(*vectors, strict=True))
    exact, by_inverse = _py_kernel_and_inv(kind, requested, allocatable, weights)
    assert 0 <= exact <= 100 and by_inverse == exact
    if kind != "BalancedAllocation":
        assert exact == _kube_fit(kind, requested, allocatable, weights, wide=True)
        # kube's share in exact integers: the same, or within one where it is wide
        assert abs(_kube_fit(kind, requested, allocatable, weights, wide=False) - exact) <= 1


@pytest.mark.parametrize(
    ("kind", "requested", "allocatable", "want"),
    [
        # requested = capacity = 10**17: 10**19 overflowed int64 (scored -84 before)
        ("MostAllocated", [10**17], [10**17], 100),
        ("LeastAllocated", [0], [10**17], 100),
        # half of 2**58: 50, not -14; 98% of 2**62 without its low byte: 97
        ("LeastAllocated", [_SHARE_EXACT], [2**62], 97),
        ("MostAllocated", [2**57], [2**58], 50),
        ("LeastAllocated", [2**57], [2**58], 50),
        # requested above a huge capacity: capped (Most), 0 (Least)
        ("MostAllocated", [2**62], [2**61], 100),
        ("LeastAllocated", [2**62], [2**61], 0),
        # capacity 0: the resource is left out (a lone one scores 0)
        ("MostAllocated", [5, 2**60], [0, 2**61], 50),
        ("LeastAllocated", [5], [0], 0),
    ],
)
def test_allocation_scores_of_huge_quantities(kind, requested, allocatable, want):
    weights = [1] * len(requested)
    assert _py_kernel_and_inv(kind, requested, allocatable, weights) == (want, want)


@pytest.mark.parametrize(
    ("requested", "allocatable"),
    [
        # 510m/750m and 512Mi/1Gi: (1 - std) * 100 = 90.00000000000001 with the IEEE
        # quotients, 91.0 with 510 * (1 / 750) (see test_placer's vectorized test)
        ([510, 512 * 2**20], [750, 2**30]),
        # proportional: std == 0 exactly
        ([250, 2**30], [1000, 4 * 2**30]),
        ([1000, 4 * 2**30], [1000, 4 * 2**30]),
        ([2000, 0], [1000, 4 * 2**30]),
    ],
)
def test_reciprocal_balanced_allocation_near_integer_results(requested, allocatable):
    exact, by_inverse = _py_kernel_and_inv("BalancedAllocation", requested, allocatable, [1, 1])
    assert by_inverse == exact


@given(st.floats(min_value=-(2.0**62), max_value=2.0**62, allow_nan=False))
def test_spread_rounding_is_go_math_round(x):
    # PodTopologySpread rounds a raw score with Go's math.Round (halves away from
    # zero): the exact decimal rounding of the same double, without libm.
    assert _py_round_half_away(x) == int(Decimal(x).to_integral_value(ROUND_HALF_UP))


@pytest.mark.parametrize(
    "x, want",
    [
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),
        (-0.5, -1),
        (-2.5, -3),
        (0.49999999999999994, 0),
        (4503599627370495.5, 4503599627370496),
        (2.0**52 + 1, 2**52 + 1),
        (-0.0, 0),
    ],
)
def test_spread_rounding_at_halves_and_the_double_limit(x, want):
    assert _py_round_half_away(x) == want
