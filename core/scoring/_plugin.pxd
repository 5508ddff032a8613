# What every scoring kernel shares: the score range, the compiled plugin spec and the
# one signature every plugin is called through (see _table.pxd).
from esched.core._types cimport score_t, units_t, word_t


cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil
    int __builtin_popcountll(unsigned long long) nogil

cdef extern from *:
    """
    #define ESCHED_SHARE_EXACT 92233720368547758LL  /* (2**63 - 1) // 100 */
    """
    # Up to this, part * MAX_NODE_SCORE fits in int64 (node_share).
    const long long SHARE_EXACT "ESCHED_SHARE_EXACT"

cdef enum:
    MAX_NODE_SCORE = 100        # framework.MaxNodeScore
    MAX_CUSTOM_PRIORITY_SCORE = 10  # config.MaxCustomPriorityScore (RTCR shape scores)
    MAX_UTILIZATION = 100       # RTCR shape utilization range
    MAX_PLUGIN_RES = 8          # resources one plugin may weigh (kube allows any; 8 is plenty)
    MAX_SHAPE = 16              # RTCR shape points
    MAX_PLUGINS = 12            # score plugins per profile (kube's defaults, esched's, 8 more)

# Plugin kinds, resolved once per profile.
cdef enum:
    PLUGIN_LEAST_ALLOCATED = 1
    PLUGIN_MOST_ALLOCATED = 2
    PLUGIN_REQUESTED_TO_CAPACITY_RATIO = 3
    PLUGIN_BALANCED_ALLOCATION = 4
    PLUGIN_EPVM = 5
    PLUGIN_MIXED = 6
    PLUGIN_PYTHON = 7
    PLUGIN_NODE_GROUP_AFFINITY = 8
    PLUGIN_PAPER_BEST_FIT = 9
    PLUGIN_NODE_AFFINITY = 10       # preferred node affinity (normalized over the scored nodes)
    PLUGIN_TAINT_TOLERATION = 11    # PreferNoSchedule taints (reverse-normalized)
    PLUGIN_INTER_POD_AFFINITY = 12  # preferred inter-pod terms (min-max normalized)
    PLUGIN_POD_TOPOLOGY_SPREAD = 13 # ScheduleAnyway spread constraints (reverse-normalized)
    PLUGIN_USAGE = 14               # measured load (Volcano's usage plugin, _usage.pxd)

cdef struct PluginSpec


ctypedef struct ScoreInput:
    # One node for one plugin, gathered by the caller from its tables (kube's
    # requested/allocatable vectors over the plugin's resources, in its order).
    const units_t* used          # [n_res] the node's side before the pod
    const units_t* pod           # [n_res] the pod's side
    const units_t* requested     # [n_res] used + pod
    const units_t* allocatable   # [n_res]; 0: the resource is not scored
    long long priority           # the pod's priority (Mixed)
    const word_t* labels         # [label_words] the node's label bits
    const word_t* pref           # [label_words] the class's preferred node groups; NULL: none
    int label_words
    # Normalized plugins (kube's NormalizeScore): the node's raw score (_gather.pxd
    # plugin_raw) and the largest and smallest raw scores over the nodes being scored.
    long long raw
    long long raw_max
    long long raw_min
    # [n_res] 1.0 / allocatable (0 where allocatable is 0), for the kernels' reciprocal
    # variants (_table.pxd score_inv); NULL when the caller has none (PluginSpec.fn).
    const double* inv
    # Usage: the node's reported usage row (state columns, PluginSpec.col), NULL when
    # the node has no fresh report; set by the gather for that kind only.
    const units_t* usage

# A plugin's score of one node, 0..MAX_NODE_SCORE: one function per kind, chosen once
# per profile (PluginSpec.fn), so scoring a node is one indirect call per plugin.
ctypedef score_t (*score_fn)(const PluginSpec* s, const ScoreInput* x) noexcept nogil


cdef struct PluginSpec:
    int kind
    score_fn fn                          # the kind's kernel (_table.pxd kernel_of)
    score_t weight                       # profile weight of the whole plugin
    int n_res
    Py_ssize_t col[MAX_PLUGIN_RES]       # ClusterState column of each resource
    int nz[MAX_PLUGIN_RES]               # 0 cpu / 1 memory: use non-zero requests; -1 not
    int scalar[MAX_PLUGIN_RES]           # extended resource: skipped when the pod asks none
    units_t res_weight[MAX_PLUGIN_RES]
    int n_shape                          # RequestedToCapacityRatio
    long long shape_util[MAX_SHAPE]
    long long shape_score[MAX_SHAPE]     # already scaled to 0..MAX_NODE_SCORE
    double epvm_base                     # E-PVM
    long long prod_priority              # Mixed: priority >= this is the production band
    long long exhaust_permille           # Mixed: free share below this is "exhausted"
    long long strand_permille            # Mixed: penalty weight (per mille of base score)
    long long max_spec[MAX_PLUGIN_RES]   # PaperBestFit: each resource's normaliser
    long long hard_weight                # InterPodAffinity: hardPodAffinityWeight
    bint ignore_existing                 # InterPodAffinity: ignorePreferredTermsOfExistingPods


ctypedef struct WeightedSum:
    # A weighted mean under way (LeastAllocated, MostAllocated): kube's nodeScore and
    # weightSum, one resource at a time (the kernels' *_add), then weighted_mean.
    score_t node_score
    score_t weight_sum


cdef inline void weighted_sum_start(WeightedSum* a) noexcept nogil:
    a.node_score = 0
    a.weight_sum = 0


cdef inline score_t weighted_mean(const WeightedSum* a) noexcept nogil:
    """nodeScore / weightSum, 0 when no resource was scored."""
    if a.weight_sum == 0:
        return 0
    return floor_div(a.node_score, a.weight_sum)


cdef inline long long floor_div(long long a, long long b) noexcept nogil:
    """``a // b`` for a >= 0, b > 0, exactly, without a 64-bit ``idiv`` in the common case.

    A 64-bit integer division costs 40-90 cycles on many x86 cores and the scoring
    kernels need two or three per node; a double division is ~15. Below 2**52 the
    double quotient is within one of the true one, and one multiply-compare fixes it,
    so results equal Go's integer division bit for bit.
    """
    if (b & (b - 1)) == 0:
        # Weight sums are usually 1, 2 or 4: a shift.
        return a >> __builtin_ctzll(<unsigned long long>b)
    return floor_div_nopow2(a, b)


cdef inline long long floor_div_nopow2(long long a, long long b) noexcept nogil:
    """``a // b`` for a >= 0, b > 0, exactly; one double division when a, b < 2**52.

    Exact without a correction step: both operands convert exactly, IEEE division
    rounds a/b correctly, and if a/b = k - d is not an integer then d >= 1/b, while
    rounding up to k needs d <= k * 2**-53, i.e. b * k >= 2**53; but b * k <= a + b
    < 2**53. So truncating the rounded quotient gives floor(a/b) (tests/core/test_kernels.py).
    """
    cdef long long q
    if ((a | b) >> 52) == 0:
        return <long long>(<double>a / <double>b)
    if a < (1LL << 52) and b < (1LL << 52):
        # a < 0 (only after an overflow upstream): as before, the corrected floor
        q = <long long>(<double>a / <double>b)
        if q * b > a:
            q -= 1
        elif (q + 1) * b <= a:
            q += 1
        return q
    return a // b


cdef inline long long div_by_cap(long long num, long long cap, double inv_cap) noexcept nogil:
    """``num // cap`` (num >= 0, cap > 0) given ``inv_cap = 1.0 / cap``: no division.

    For num, cap < 2**52 the product is within a few ulps of the quotient, so its
    truncation is off by at most one and one integer multiply-compare each way makes it
    exact (the kernels' quotients are at most MAX_NODE_SCORE, so q * cap cannot
    overflow); otherwise floor_div_nopow2. The reciprocal variants of the kernels use
    it where the caller keeps per-node reciprocals (tests/core/test_kernels.py).
    """
    cdef long long q
    if ((num | cap) >> 52) == 0:
        q = <long long>(<double>num * inv_cap)
        q -= q * cap > num
        q += (q + 1) * cap <= num
        return q
    return floor_div_nopow2(num, cap)


cdef inline long long node_share(long long part, long long whole) noexcept nogil:
    """``part * MAX_NODE_SCORE // whole`` for 0 <= part <= whole, 0 < whole, in
    [0, MAX_NODE_SCORE] for any quantities (up to 2**62 base units): exact up to
    SHARE_EXACT; above, where the 64-bit product overflows (kube-scheduler's int64
    arithmetic returns a score outside the range there, which its framework refuses),
    the share of the two without their low byte (whole > 2**56: within one of the
    exact share). The common case (both below 2**52) tests nothing more than
    floor_div_nopow2 does; no 128-bit arithmetic, whose registers would cost every
    kernel call."""
    cdef long long a = part * MAX_NODE_SCORE
    if ((a | whole) >> 52) == 0:
        return floor_div_nopow2(a, whole)
    if part > SHARE_EXACT:
        a = (part >> 8) * MAX_NODE_SCORE
        whole >>= 8
    return floor_div_nopow2(a, whole)


cdef inline long long node_share_inv(long long part, long long whole,
                                     double inv_whole) noexcept nogil:
    """node_share given ``inv_whole = 1.0 / whole`` (div_by_cap): the same integers."""
    cdef long long num = part * MAX_NODE_SCORE
    if ((num | whole) >> 52) == 0:
        return div_by_cap(num, whole, inv_whole)
    return node_share(part, whole)


cdef inline score_t default_normalize(long long raw, long long raw_max,
                                      bint reverse) noexcept nogil:
    """kube's helper.DefaultNormalizeScore(MaxNodeScore, reverse) for one node: raw
    scaled to 0..MAX_NODE_SCORE by the largest raw score of the scored nodes (reversed:
    MAX_NODE_SCORE minus that); all raw scores 0: 0, or MAX_NODE_SCORE reversed."""
    if raw_max <= 0:
        return MAX_NODE_SCORE if reverse else 0
    if raw > raw_max:
        raw = raw_max  # a node outside the scored set (scores of an infeasible node)
    raw = MAX_NODE_SCORE * raw // raw_max
    return MAX_NODE_SCORE - raw if reverse else raw
