"""The yardstick of ``esched bench core``: a plain C placement loop, measured in-process.

DESIGN.md compares the core with "a plain C loop" on the same workload: visit nodes
from a rotating start, check cpu, memory and the pod count, score LeastAllocated +
BalancedAllocation with kube's integer formulas (64-bit integer division, a double
division per fraction), keep the best, stop after the sampling target. No cache, no
labels, no ties broken, no Python. The benchmark times it in the same process as the
placer, so on a shared, noisy machine the ratio placer / yardstick is the figure that
means something (both see the same load).
"""

from libc.math cimport fabs
from libc.stdint cimport int64_t

import time

import numpy as np


def yardstick(allocatable, requests, long long target) -> float:
    """Place ``requests`` ([pod, 3]: cpu, memory, pods) on ``allocatable`` ([node, 3]).

    Each pod visits nodes from where the previous one stopped until ``target`` feasible
    nodes were scored (kube's sampling; ``target`` >= nodes: a full scan), and is
    assumed on the best. Returns pods per second.
    """
    cdef int64_t[:, ::1] cap = np.ascontiguousarray(allocatable, dtype=np.int64)
    cdef int64_t[:, ::1] req = np.ascontiguousarray(requests, dtype=np.int64)
    used_np = np.zeros((cap.shape[0], 3), dtype=np.int64)
    cdef int64_t[:, ::1] used = used_np
    cdef Py_ssize_t N = cap.shape[0], P = req.shape[0], j, k, n, best, start = 0
    cdef long long found
    cdef int64_t q0, q1, q2, s, bs, a0, a1, la
    cdef double f0, f1
    if N == 0 or P == 0:
        return 0.0
    t0 = time.perf_counter()
    with nogil:
        for j in range(P):
            best = -1
            bs = -1
            found = 0
            k = 0
            while k < N:
                n = start + k
                if n >= N:
                    n -= N
                k += 1
                q0 = used[n, 0] + req[j, 0]
                q1 = used[n, 1] + req[j, 1]
                q2 = used[n, 2] + req[j, 2]
                a0 = cap[n, 0]
                a1 = cap[n, 1]
                if q0 > a0 or q1 > a1 or q2 > cap[n, 2] or a0 == 0 or a1 == 0:
                    continue
                la = ((a0 - q0) * 100 // a0 + (a1 - q1) * 100 // a1) // 2
                f0 = <double>q0 / <double>a0
                f1 = <double>q1 / <double>a1
                s = la + <int64_t>((1.0 - fabs((f0 - f1) / 2.0)) * 100.0)
                if s > bs:
                    bs = s
                    best = n
                found += 1
                if found >= target:
                    break
            start = (start + k) % N
            if best >= 0:
                used[best, 0] += req[j, 0]
                used[best, 1] += req[j, 1]
                used[best, 2] += req[j, 2]
    elapsed = time.perf_counter() - t0
    return P / elapsed if elapsed > 0 else 0.0
