# Feasibility: does a class fit a node, and if not, why -- the one home of the rule.
#
# Alive; schedulable (unless the pod tolerates node.kubernetes.io/unschedulable); the
# node the pod names (spec.nodeName, kube's NodeName); every resource the pod limits
# (``pods`` is the pod-count limit), by band (Borg 5.5): its limits against the
# node's limits for production pods, against the node's reservations otherwise; taints with NoSchedule or NoExecute; nodeSelector
# and required node affinity (compiled per class into bit masks over the state's
# interned labels, and node slot lists for matchFields on metadata.name, see
# esched.core._constraints); host ports (kube's NodePorts: a per-class conflict mask
# over the placer's per-node bitset of bound port keys); required inter-pod affinity and
# anti-affinity, the pod's own and existing pods' (kube's InterPodAffinity: IpCheck
# counts per topology domain, see esched.core._interpod); measured load under the
# profile's Usage thresholds when it filters on them (Volcano's usage predicate). The placer's scan, its scalar
# block path, explain/fits, the commit validation (binding_reasons) and preemption all
# call these; the vectorized block kernel (_fused_block.h) checks the same
# alive/cordon/resource rule in vector form and leaves the rest to constraints_ok.
# Failures are reason bits (esched.core.reasons words them).
from libc.stdint cimport int32_t, uint64_t

from esched.core._classview cimport (
    IP_AFFINITY,
    IP_AFFINITY_FIRST,
    IP_ANTI,
    ClassView,
    IpCheck,
    SpreadCheck,
)
from esched.core._types cimport NODE_ALIVE, NODE_UNSCHEDULABLE, flag_t, units_t, word_t
from esched.core.scoring._usage cimport usage_over

# Reason bits; bit REASON_RESOURCE_BASE + column = insufficient resource. The words of
# each bit are esched.core.reasons' table (keep the two in step).
cdef enum:
    REASON_NOT_ALIVE = 1
    REASON_UNSCHEDULABLE = 2
    REASON_SELECTOR = 4
    REASON_TAINT = 8
    REASON_NODE_NAME = 16
    REASON_NODE_PORTS = 32
    REASON_POD_AFFINITY = 64
    REASON_POD_ANTI_AFFINITY = 128
    REASON_EXISTING_ANTI_AFFINITY = 256
    REASON_SPREAD = 512
    REASON_SPREAD_LABEL = 1024
    REASON_USAGE = 2048             # measured load above the profile's Usage thresholds
    REASON_RESOURCE_BASE = 12       # bit index of column 0
    MAX_REASON_RESOURCES = 52       # columns beyond share the last bit
    REASON_NON_RESOURCE = 4095      # every bit below REASON_RESOURCE_BASE's

cdef enum:
    EXPR_ANY = 0     # some bit of the mask is set on the node
    EXPR_NONE = 1    # no bit of the mask is set on the node
    EXPR_FALSE = 2   # never matches (empty term, unsupported matchFields)
    EXPR_NODE_IN = 3      # the node's slot is in the expression's node list
    EXPR_NODE_NOT_IN = 4  # it is not (matchFields metadata.name NotIn)


cdef inline uint64_t resource_reason(Py_ssize_t col) noexcept nogil:
    """The reason bit of an insufficient resource column."""
    return (<uint64_t>1) << (REASON_RESOURCE_BASE + (
        col if col < MAX_REASON_RESOURCES - 1 else MAX_REASON_RESOURCES - 1))


cdef inline bint expr_ok(const ClassView* v, Py_ssize_t n, int e) noexcept nogil:
    cdef int w, W = v.label_words
    cdef int mode = v.expr_mode[e]
    cdef bint hit = False
    cdef const word_t* row = v.label_bits + n * W
    cdef int32_t i
    if mode == EXPR_FALSE:
        return False
    if mode >= EXPR_NODE_IN:
        for i in range(v.expr_node_off[e], v.expr_node_off[e + 1]):
            if v.expr_nodes[i] == n:
                hit = True
                break
        return hit if mode == EXPR_NODE_IN else not hit
    for w in range(W):
        if row[w] & v.expr_mask[e * W + w]:
            hit = True
            break
    return hit if v.expr_mode[e] == EXPR_ANY else not hit


cdef inline bint taints_ok(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """No NoSchedule/NoExecute taint of node n is untolerated."""
    cdef int w
    cdef const word_t* taints = v.taint_bits + n * v.taint_words
    cdef word_t bad = 0
    for w in range(v.taint_words):
        bad |= taints[w] & v.intolerable[w]
    return bad == 0


cdef inline bint ports_ok(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """None of the pod's host ports is taken on node n (kube's NodePorts)."""
    cdef int w
    cdef const word_t* row = v.port_bits + n * v.port_words
    for w in range(v.port_words):
        if row[w] & v.port_conflict[w]:
            return False
    return True


cdef inline bint selector_ok(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """nodeSelector (term 0, ANDed) and required affinity (terms 1.., ORed)."""
    cdef int t, e
    cdef bint ok = True
    for e in range(v.term_off[0], v.term_off[1]):
        if not expr_ok(v, n, e):
            return False
    if v.n_terms > 1:
        for t in range(1, v.n_terms):
            ok = True
            for e in range(v.term_off[t], v.term_off[t + 1]):
                if not expr_ok(v, n, e):
                    ok = False
                    break
            if ok:
                return True
        return False
    return True


cdef inline uint64_t interpod_bits(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """kube's InterPodAffinity filter on node n: the first failing of the pod's affinity,
    its anti-affinity, existing pods' anti-affinity (the checks are in that order)."""
    cdef int i
    cdef int32_t d
    cdef const IpCheck* c
    for i in range(v.n_ip):
        c = &v.ip[i]
        d = c.dom[n]
        if c.kind == IP_AFFINITY:
            if d < 0 or c.cnt[1 + d] <= 0:
                return REASON_POD_AFFINITY
        elif c.kind == IP_AFFINITY_FIRST:
            if d < 0:
                return REASON_POD_AFFINITY
        elif d >= 0 and c.cnt[1 + d] > 0:
            return REASON_POD_ANTI_AFFINITY if c.kind == IP_ANTI else REASON_EXISTING_ANTI_AFFINITY
    return 0


cdef inline uint64_t spread_bits(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """kube's PodTopologySpread filter (DoNotSchedule) on node n: constraint by
    constraint, the node must have the key and the skew stay within maxSkew."""
    cdef int i
    cdef int32_t d
    cdef const SpreadCheck* c
    for i in range(v.n_spread):
        c = &v.spread[i]
        d = c.dom[n]
        if d < 0:
            return REASON_SPREAD_LABEL
        if c.cnt[1 + d] > c.limit:
            return REASON_SPREAD
    return 0


cdef inline bint usage_hot(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """Node n's fresh reported usage is above the profile's Usage threshold of some
    resource (Volcano's usage predicate); a node without a fresh report never is."""
    cdef int i
    cdef Py_ssize_t col
    if not v.measured[n]:
        return False
    for i in range(v.n_hot):
        col = v.hot_col[i]
        if usage_over(v.usage[n * v.n_res + col], v.alloc[n * v.alloc_stride + col],
                      v.hot_pct[i]):
            return True
    return False


cdef inline bint constraints_ok(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """Node name, taints, label, inter-pod and usage constraints (what the vectorized
    kernel leaves to the caller)."""
    if v.pinned and n != v.pin:
        return False
    if v.n_spread > 0 and spread_bits(v, n) != 0:
        return False
    if v.n_ip > 0 and interpod_bits(v, n) != 0:
        return False
    if v.has_ports and not ports_ok(v, n):
        return False
    if v.has_taints and not taints_ok(v, n):
        return False
    if v.has_labels and not selector_ok(v, n):
        return False
    if v.n_hot > 0 and usage_hot(v, n):
        return False
    return True


cdef inline uint64_t reason_bits(const ClassView* v, Py_ssize_t n, bint all_reasons) noexcept nogil:
    """0 if the class fits node ``n``, else REASON_* bits (the first failure, or all)."""
    cdef uint64_t out = 0
    cdef Py_ssize_t r
    cdef units_t need
    cdef flag_t flags = v.flags[n]
    # resources: the pod's limits against the node's accounting of its band
    cdef const units_t* used = v.fit_used + n * v.n_res
    cdef const units_t* alloc = v.alloc + n * v.alloc_stride
    if not (flags & NODE_ALIVE):
        return REASON_NOT_ALIVE
    if (flags & NODE_UNSCHEDULABLE) and not v.tolerates_unschedulable:
        out |= REASON_UNSCHEDULABLE
        if not all_reasons:
            return out
    if v.pinned and n != v.pin:
        out |= REASON_NODE_NAME
        if not all_reasons:
            return out
    cdef int j
    if v.n_need >= 0:
        # the class's requested columns (_view): the same test, fewer columns
        for j in range(v.n_need):
            r = v.need_col[j]
            if used[r] + v.need_val[j] > alloc[r]:
                out |= resource_reason(r)
                if not all_reasons:
                    return out
    else:
        for r in range(v.n_res):
            need = v.fit_req[r]
            if need > 0 and used[r] + need > alloc[r]:
                out |= resource_reason(r)
                if not all_reasons:
                    return out
    if v.has_taints and not taints_ok(v, n):
        out |= REASON_TAINT
        if not all_reasons:
            return out
    if v.has_labels and not selector_ok(v, n):
        out |= REASON_SELECTOR
        if not all_reasons:
            return out
    if v.has_ports and not ports_ok(v, n):
        out |= REASON_NODE_PORTS
        if not all_reasons:
            return out
    if v.n_spread > 0:
        out |= spread_bits(v, n)
        if out and not all_reasons:
            return out
    if v.n_ip > 0:
        out |= interpod_bits(v, n)
        if out and not all_reasons:
            return out
    if v.n_hot > 0 and usage_hot(v, n):
        out |= REASON_USAGE
    return out


cdef inline bint fits(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """The class fits node ``n`` (alive, every rule)."""
    return reason_bits(v, n, False) == 0
