"""Thin Python entry points to the scoring kernels' ``nogil`` functions, for table
tests (as sklearn's ``_py_*``): ``tests/core/test_kernels.py`` checks them against
kube's formulas. Not used by the scheduler.
"""

from esched.core._types cimport units_t
from esched.core.scoring._epvm cimport epvm
from esched.core.scoring._mixed cimport mixed
from esched.core.scoring._plugin cimport (
    MAX_PLUGIN_RES,
    MAX_SHAPE,
    PLUGIN_BALANCED_ALLOCATION,
    PLUGIN_LEAST_ALLOCATED,
    PLUGIN_MOST_ALLOCATED,
    PluginSpec,
    ScoreInput,
    div_by_cap,
    floor_div,
)
from esched.core.scoring._pod_topology_spread cimport round_half_away
from esched.core.scoring._requested_to_capacity_ratio cimport broken_linear
from esched.core.scoring._table cimport kernel_of, score_inv
from esched.core.scoring._usage cimport usage_over, usage_score

__all__ = [
    "_py_broken_linear",
    "_py_div_by_cap",
    "_py_epvm",
    "_py_floor_div",
    "_py_kernel_and_inv",
    "_py_mixed",
    "_py_round_half_away",
    "_py_usage",
    "_py_usage_over",
]


def _py_floor_div(long long a, long long b) -> int:
    """``a // b`` through the kernels' division (a >= 0, b > 0)."""
    return floor_div(a, b)


def _py_div_by_cap(long long num, long long cap) -> int:
    """``num // cap`` through the kernels' reciprocal division (num >= 0, cap > 0)."""
    return div_by_cap(num, cap, 1.0 / <double>cap)


_PY_KINDS = {
    "LeastAllocated": PLUGIN_LEAST_ALLOCATED,
    "MostAllocated": PLUGIN_MOST_ALLOCATED,
    "BalancedAllocation": PLUGIN_BALANCED_ALLOCATION,
}


def _py_kernel_and_inv(str kind, requested, allocatable, weights) -> tuple[int, int]:
    """A kernel on explicit vectors, and its reciprocal variant (ScoreInput.inv) on them."""
    cdef PluginSpec s
    cdef ScoreInput x
    cdef units_t r[MAX_PLUGIN_RES]
    cdef units_t a[MAX_PLUGIN_RES]
    cdef double inv[MAX_PLUGIN_RES]
    s.kind = _PY_KINDS[kind]
    s.n_res = len(requested)
    for i in range(s.n_res):
        r[i], a[i], s.res_weight[i] = requested[i], allocatable[i], weights[i]
        inv[i] = 1.0 / <double>a[i] if a[i] != 0 else 0.0
    x.requested = r
    x.allocatable = a
    x.inv = inv
    s.fn = kernel_of(s.kind)
    return s.fn(&s, &x), score_inv(&s, &x)


def _py_broken_linear(long long p, points) -> int:
    """kube's helper.BuildBrokenLinearFunction(points)(p); points: [(utilization, score)]."""
    cdef long long util[MAX_SHAPE]
    cdef long long score[MAX_SHAPE]
    for i, (u, s) in enumerate(points):
        util[i] = u
        score[i] = s
    return broken_linear(p, util, score, len(points))


def _py_mixed(requested, allocatable, weights, bint production, long long exhaust_permille,
              long long strand_permille) -> int:
    """The Mixed kernel on explicit vectors."""
    cdef units_t r[MAX_PLUGIN_RES]
    cdef units_t a[MAX_PLUGIN_RES]
    cdef units_t w[MAX_PLUGIN_RES]
    for i in range(len(requested)):
        r[i], a[i], w[i] = requested[i], allocatable[i], weights[i]
    return mixed(r, a, w, len(requested), production, exhaust_permille, strand_permille)


def _py_epvm(used, request, allocatable, weights, double base) -> int:
    """The E-PVM kernel on explicit vectors."""
    cdef units_t u[MAX_PLUGIN_RES]
    cdef units_t q[MAX_PLUGIN_RES]
    cdef units_t a[MAX_PLUGIN_RES]
    cdef units_t w[MAX_PLUGIN_RES]
    for i in range(len(used)):
        u[i], q[i], a[i], w[i] = used[i], request[i], allocatable[i], weights[i]
    return epvm(u, q, a, w, len(used), base)


def _py_usage(usage, allocatable, weights) -> int:
    """The Usage kernel on explicit vectors (``usage`` None: a node without a fresh
    report)."""
    cdef units_t u[MAX_PLUGIN_RES]
    cdef Py_ssize_t c[MAX_PLUGIN_RES]
    cdef units_t a[MAX_PLUGIN_RES]
    cdef units_t w[MAX_PLUGIN_RES]
    for i in range(len(allocatable)):
        c[i], a[i], w[i] = i, allocatable[i], weights[i]
        u[i] = usage[i] if usage is not None else 0
    return usage_score(u if usage is not None else NULL, c, a, w, len(allocatable))


def _py_usage_over(units_t usage, units_t allocatable, long long percent) -> bool:
    """The Usage filter's test of one resource (Volcano: usage% > threshold)."""
    return usage_over(usage, allocatable, percent)


def _py_round_half_away(double x) -> int:
    """PodTopologySpread's rounding of a raw score (C's and Go's round, halves away
    from zero) as the kernel computes it."""
    return round_half_away(x)
