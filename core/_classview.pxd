# ClassView: one equivalence class compiled against the state's interned labels and
# taints, plus raw pointers into the placer's tables for the per-node loops. The
# feasibility functions (_feasibility.pxd) and the scoring gather read only this.
from libc.stdint cimport int8_t, int32_t, uint8_t

from esched.core._fused_block cimport esched_fblock
from esched.core._types cimport flag_t, units_t, word_t
from esched.core.scoring._plugin cimport MAX_PLUGIN_RES, MAX_PLUGINS

cdef enum:
    MAX_NEED = 16       # requested columns the vectorized resource check handles
    SRC_SKIP = -1       # resource not scored for this pod (extended, not requested)
    SRC_USED = 0        # node side is the allocated requests
    SRC_NZ_CPU = 1      # node side is the non-zero cpu sum
    SRC_NZ_MEM = 2      # node side is the non-zero memory sum


cdef enum:
    IP_AFFINITY = 0        # the node's domain must hold a pod matching all affinity terms
    IP_AFFINITY_FIRST = 1  # ... unless none does anywhere and the pod matches itself: key only
    IP_ANTI = 2            # the node's domain must hold no pod matching the anti-affinity term
    IP_EXISTING = 3        # the node's domain must hold no pod whose anti-affinity matches this pod


# One inter-pod check (kube's InterPodAffinity filter) over the state's topology index
# (core/_interpod.pyx), or the placer's copy with its assumptions.
ctypedef struct IpCheck:
    int kind                     # IP_*
    const int32_t* dom           # [node] domain of the term's topology key, -1: no such label
    const int32_t* cnt           # [1 + domain] matching pods (owners for IP_EXISTING); [0] total


# One DoNotSchedule topology spread constraint (kube's PodTopologySpread filter): the
# domain counts over the nodes that pass its policies, gathered per pod by the placer.
ctypedef struct SpreadCheck:
    const int32_t* dom           # [node] domain of the constraint's key, -1: no such label
    const int32_t* cnt           # [1 + domain] matching pods on eligible nodes
    long long limit              # maxSkew + global minimum - self match: cnt above fails
    const int32_t* bmin          # [block] least cnt of a node's domain in it (INT32_MAX:
                                 # none has the key); NULL: not kept. Above limit: the
                                 # whole block fails (the scan skips it)
    const int32_t* bmax          # [block] greatest (INT32_MAX: a node lacks the key); at
                                 # most limit: the whole block passes (check skipped)


# The InterPodAffinity score's weights of one topology key (_topology_views._ip_score_view):
# a node's raw score sums val[1 + dom[n]] over the view's keys.
ctypedef struct IpScore:
    const int32_t* dom           # [node] domain of the key, -1: no such label
    const long long* val         # [1 + domain] summed signed weights; [0] unused


# One ScheduleAnyway topology spread constraint (the PodTopologySpread score), gathered
# per pod by the placer (_topology_views._soft_spread_view); ``weight`` and ``size`` are set by
# the normalization walk (kube's topologyNormalizingWeight over the scored nodes).
ctypedef struct SoftSpread:
    const int32_t* dom           # [node] domain of the constraint's key, -1: no such label
    const int32_t* cnt           # [1 + domain] matching pods; host: [1 + node] per node
    long long max_skew
    bint host                    # the key is kubernetes.io/hostname: a node's own pods
    uint8_t* seen                # [n_dom] scratch of the normalization walk
    Py_ssize_t n_dom
    bint seen_none               # scratch: a scored node without the key was seen (soft_any)
    long long size               # domains (host: nodes) among the scored nodes
    double weight                # log(size + 2)


ctypedef struct ClassView:
    const units_t* req           # [n_res] requests (state.class_req row)
    units_t nz_cpu               # non-zero requests for scoring
    units_t nz_mem
    long long priority
    int n_exprs
    const word_t* expr_mask      # [n_exprs, label_words]
    const int8_t* expr_mode      # [n_exprs]
    const int32_t* term_off      # [n_terms + 1]; term 0 = nodeSelector (ANDed)
    const int32_t* expr_node_off # [n_exprs + 1] into expr_nodes (EXPR_NODE_IN / _NOT_IN)
    const int32_t* expr_nodes    # node slots named by matchFields on metadata.name
    int n_terms                  # including term 0; > 1 means required affinity (ORed)
    # Preferred node affinity terms (the NodeAffinity score): terms n_terms ..
    # n_terms + n_pref_terms - 1 of term_off, each with its weight.
    int n_pref_terms
    const long long* pref_weight # [n_pref_terms]
    const word_t* prefer_intolerable  # [taint_words] PreferNoSchedule taints not tolerated
    bint has_prefer_taints       # some interned PreferNoSchedule taint is not tolerated
    const word_t* intolerable    # [taint_words] taints the pod does not tolerate
    bint tolerates_unschedulable
    bint has_ports               # host ports (kube's NodePorts): none of port_conflict on the node
    const word_t* port_conflict  # [port_words]
    const word_t* port_bits      # placer's host-port keys per node, row stride port_words
    int port_words
    bint pinned                  # spec.nodeName (kube's NodeName filter): only node ``pin``
    Py_ssize_t pin               # its slot; -1: no such node (fits nowhere)
    bint has_labels
    bint has_taints
    int n_ip                     # inter-pod checks, in IP_* order (0: none)
    const IpCheck* ip
    int n_spread                 # topology spread constraints (0: none)
    const SpreadCheck* spread
    int n_ips                    # InterPodAffinity score keys (0: the plugin skips the pod)
    const IpScore* ips
    int n_soft                   # PodTopologySpread score constraints (0: the plugin skips)
    SoftSpread* soft
    bint soft_any                # kube's system defaults: nodes lacking a key are scored
    const word_t* pref_mask      # [label_words] preferred node groups of the pod's queue
    bint has_pref
    # The plugins that score this class, in profile order (kube's PreScore "Skip": e.g.
    # NodeGroupAffinity for a class without preferred groups; Python plugins run apart).
    int n_active
    int active[MAX_PLUGINS]
    # The active plugins normalized over the scored nodes (kube's NormalizeScore), and
    # per plugin the largest raw score of the nodes being scored (set by the caller
    # before it scores: _placer's normalized scan, explain, scores).
    int n_norm
    int norm[MAX_PLUGINS]
    long long raw_max[MAX_PLUGINS]
    long long raw_min[MAX_PLUGINS]
    # Per plugin k and resource i, resolved once per class (not per node):
    units_t pod_req[MAX_PLUGINS][MAX_PLUGIN_RES]   # the pod's side of the request
    int src[MAX_PLUGINS][MAX_PLUGIN_RES]           # node side: SRC_* (SRC_SKIP: not scored)
    # Raw table pointers for the per-node loop, taken once per call so the compiler can
    # keep them in registers (memoryview attributes are reloaded after every store).
    const units_t* alloc         # placer's copy of state.allocatable, row stride alloc_stride
    Py_ssize_t alloc_stride
    const units_t* used          # placer's used, row stride n_res
    # Feasibility by band (Borg 5.5, core/reservations.py): the pod's limits against
    # the node's limits (production) or its accounting by reservations (the others).
    const units_t* fit_req       # [n_res] the class's limits (state.class_lim row)
    const units_t* fit_used      # placer's flim or fnp, row stride n_res
    bint by_reservations         # fit_used is the accounting by reservations
    const units_t* nzu           # placer's non-zero cpu/memory, row stride 2
    const flag_t* flags
    const word_t* label_bits     # row stride label_words
    const word_t* taint_bits     # row stride taint_words
    int label_words
    int taint_words
    int n_res
    # Measured load (the Usage plugin; NULL when no profile has it): the placer's copy of
    # the fresh reported usage (row stride n_res) and which nodes have one; the class's
    # profile's Usage filter: n_hot columns, each with its percent (_feasibility.pxd
    # usage_hot; n_hot 0: the profile does not filter on usage).
    const units_t* usage
    const uint8_t* measured
    int n_hot
    Py_ssize_t hot_col[MAX_PLUGIN_RES]
    long long hot_pct[MAX_PLUGIN_RES]
    # The columns this class requests (need > 0), for the vectorized resource check.
    int n_need                   # -1: more than MAX_NEED columns (no vectorized kernel)
    Py_ssize_t need_col[MAX_NEED]
    units_t need_val[MAX_NEED]
    # Vectorized block scoring (_fused_block.h), filled by Placer._view when it applies:
    # fused profile, every capacity and request of this class below FB_EXACT_LIMIT.
    bint use_fb
    bint fb_special              # some node has a zero cpu or memory capacity
    esched_fblock fb
