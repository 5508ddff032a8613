# The Placer's contract: its C-level state and methods, for modules that cimport it
# (Python callers use the methods and properties documented in _placer.pyx).
cimport cython
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t

from esched.core._classview cimport ClassView, IpCheck, IpScore, SoftSpread, SpreadCheck
from esched.core._fused_block cimport esched_fbsum
from esched.core._state cimport ClassMemo, ClusterState
from esched.core._types cimport flag_t, score_t, units_t, word_t
from esched.core.scoring._plugin cimport MAX_PLUGIN_RES, PluginSpec

# Cache: CACHE_SLOTS dense rows (a score and a stamp per node: 12 bytes; 1.9 MB for
# 10,000 nodes) plus a summary per block of ESCHED_FB_BLOCK nodes. A class uses the
# cache when it was placed within the last CACHE_SLOTS placements, so the rows in use
# are never evicted by one-off classes.
cdef enum:
    CACHE_SLOTS = 16
    FEW_STALE = 8               # up to this many stale entries in a step: redo just those
    BLOCK_SHIFT = 7             # 1 << BLOCK_SHIFT == ESCHED_FB_BLOCK (checked at import)
    EPOCH_SHIFT = 48            # stamps: tick (< 2**48) | slot epoch << EPOCH_SHIFT
    # A row's epoch stays below EPOCH_LIMIT (the stamps' sign bit clear, so the empty
    # stamp -1 never matches); reaching it, the row is cleared (_new_epoch).
    EPOCH_LIMIT = 1 << (63 - EPOCH_SHIFT)
    # A class whose row's visits missed more than MISS_ROUNDS times the nodes since one
    # paid gives it up for 2**k rounds of the walk (k its step-asides since, at most
    # MAX_PAUSE).
    MISS_ROUNDS = 2
    MAX_PAUSE = 6
    MAX_PROFILES = 16           # profiles of one KubeSchedulerConfiguration


ctypedef struct ClassConst:
    # Placer._view's per-class memo of the compiled constraints (pointers into the
    # arrays of the class's _Compiled, which self.compiled keeps alive), valid while
    # the state's intern sizes equal the stamp; s0 == -1: not filled.
    Py_ssize_t s0, s1, s2, s3
    long long node_gen           # the state's node_gen the node slots are for; -1: none
    long long priority
    int n_exprs
    int n_terms
    const word_t* expr_mask
    const int8_t* expr_mode
    const int32_t* term_off
    const int32_t* expr_node_off
    const int32_t* expr_nodes
    bint pinned
    Py_ssize_t pin
    bint has_ports
    const word_t* port_conflict
    const word_t* intolerable
    bint tolerates_unschedulable
    bint has_labels
    bint has_taints
    const word_t* pref_mask
    bint has_pref
    int n_terms_req              # required terms (term 0 included); preferred ones follow
    int n_pref_terms
    const long long* pref_weight
    const word_t* prefer_intolerable
    bint has_prefer_taints
    int profile                  # the class's profile (its pods' schedulerName)


ctypedef struct Fused:
    # The profile NodeResourcesFit (LeastAllocated or MostAllocated) and/or
    # BalancedAllocation, each on exactly (cpu, memory): kube's default and its usual
    # variants, which the vectorized block kernel (_fused_block.h) scores. Resolved once
    # per profile: the kernel's parameters.
    bint on
    bint has_fit
    bint fit_least               # LeastAllocated (else MostAllocated)
    score_t w_fit
    units_t rw0, rw1             # fit resource weights (cpu, memory)
    score_t ws_both              # rw0 + rw1
    bint has_bal
    score_t w_bal
    Py_ssize_t c0, c1            # state columns of cpu, memory


@cython.final
cdef class Placer:
    cdef ClusterState state
    # The selected profile's plugin table (its kernels, weights) and fused parameters:
    # _view selects the class's profile (_select) before anything scores it.
    cdef PluginSpec* specs
    cdef int n_specs
    cdef Fused* pf
    # Every profile of the configuration, resolved once (index 0: the pods naming no
    # scheduler); fused: on when some profile is, for the block kernel's columns.
    cdef PluginSpec* pspecs[MAX_PROFILES]
    cdef int pn_specs[MAX_PROFILES]
    cdef Fused pfused[MAX_PROFILES]
    cdef int n_profiles
    cdef int cur_profile
    cdef list ptables
    cdef dict profile_of_name
    cdef object added                    # the selected profile's NodeAffinity addedAffinity
    cdef tuple spread_defaults           # the selected profile's default spread constraints
    cdef bint spread_system              # ... kube's system defaults (no key required)
    cdef Fused fused
    cdef public list plugin_names
    cdef list py_plugins
    cdef bint has_python
    cdef bint has_node_group             # the profile scores the queue's preferred node groups
    cdef public object profile
    cdef public long long percentage
    cdef public bint use_cache
    cdef public bint sample
    cdef public bint prune               # esched_fbound in _scan (same decisions; off to check)
    cdef uint64_t rng
    cdef public long long seed

    cdef object used_np, nzu_np, ver_np, sver_np, inv_np, alloc_np
    cdef double[:, ::1] inv
    cdef units_t[:, ::1] alloc          # [node, n_res] compact copy of state.allocatable
    cdef units_t[:, ::1] used
    # Reclamation (Borg 5.5): per node, limits and reservations of the bound pods plus
    # this view's assumptions, the burst kept back, and the accounting by reservations
    # fnp = min(flim, frsv + burst) that non-production pods are placed against.
    cdef object flim_np, frsv_np, fburst_np, fnp_np
    cdef units_t[:, ::1] flim
    cdef units_t[:, ::1] frsv
    cdef units_t[:, ::1] fburst
    cdef units_t[:, ::1] fnp
    cdef bint reclaim_on                 # state.reclamation.enabled at the last sync
    cdef readonly object fit_bands_cfg   # BandConfig judging production (None: defaults)
    cdef object fband_np                 # uint8[class]: 1 = judged by limits (production)
    cdef uint8_t[::1] fband              # its typed view (the classes resolved: fband_n)
    cdef Py_ssize_t fband_n
    # Host-port keys bound per node in this view: the state's rows, plus assumptions
    # (port_delta: slot -> {key bit: +/- pods}); see ClusterState.port_bits.
    cdef object ports_np
    cdef word_t[:, ::1] ports
    cdef dict port_delta
    cdef units_t[:, ::1] nzu
    cdef long long[::1] ver
    cdef long long[::1] sver
    # Structure-of-arrays double columns for the vectorized block kernel, [row, node]:
    # rows 0..n_res-1 used, n_res..2*n_res-1 allocatable, then ROW_* after those.
    cdef object soa_np
    cdef double[:, ::1] soa
    # Compact float rows beside them, [row, node] (_compact_node; the bounded walk
    # reads these, the double columns only for its candidates): rows 0..n_res-1 free by
    # limits, n_res..2*n_res-1 free by reservations, then CROW_* after those.
    cdef object cb_np
    cdef float[:, ::1] cb
    cdef object capflag_np
    cdef int8_t[::1] capflag             # [node] CAP_ZERO | CAP_BIG
    cdef long long n_zero_cap, n_big_cap # nodes with such a flag
    cdef long long tick
    cdef Py_ssize_t n_nodes, n_res
    cdef public long long synced_position
    cdef Py_ssize_t next_start
    cdef dict compiled
    cdef object unconstrained            # the compiled form shared by unconstrained classes
    cdef dict compiled_by_cons           # constraints key -> compiled form (classes alike)

    # Equivalence-class cache (see _scan): a dense row per recent class, CACHE_SLOTS rows.
    cdef object sc_np, se_np, sbs_np, sbt_np, bv_np, seg_np
    cdef int32_t[:, ::1] sc              # [slot, node] scores; rows CACHE_SLOTS, + 1: uncached scans
    cdef int64_t[:, ::1] se              # [slot, node] entry stamp: ver | epoch << EPOCH_SHIFT
    cdef int32_t[:, :, ::1] sbs          # [slot, block, 4] block summary (esched_fbsum)
    cdef int64_t[:, ::1] sbt             # [slot, block] its stamp: bv | epoch << EPOCH_SHIFT
    cdef int64_t[::1] bv                 # [block] tick of the block's latest node change
    cdef int64_t[:, ::1] seg             # [visit step, 3] blocks holding the best: n0, m, count
    cdef Py_ssize_t n_blocks
    cdef int64_t slot_owner[CACHE_SLOTS] # class id in each slot, -1 none
    cdef int64_t slot_used[CACHE_SLOTS]  # `calls` at its last use (the least recent goes)
    cdef int64_t slot_epoch[CACHE_SLOTS] # bumped when the slot changes class: old entries die
                                         # (_new_epoch, < EPOCH_LIMIT)
    cdef public long long hits, misses, placed, visited, unschedulable, python_plugin_errors
    cdef public object class_last_np
    cdef int64_t[::1] class_last         # [class] value of `calls` at its last placement
    cdef public object class_run_np
    cdef int64_t[::1] class_run          # [class] `walked` where its current run began
    cdef ClassConst* cconst              # [class_cap] _view's memo
    cdef Py_ssize_t cconst_cap
    cdef long long calls                 # placements attempted (the cache's clock)
    cdef long long walked                # nodes the visits went through (sum of processed)
    cdef public object gang_failure      # the last failed plan_gang's report (or None)
    cdef object evicted_np               # bool[pod]: victims this placer assumed evicted
    cdef object band_cfg, band_np        # BandConfig and uint8[class] bands resolved with it
    cdef dict hidden                     # reserved node name -> slot, hidden in this view
    cdef bint hide_reserved              # hide nodes reserved for other gangs (placement)
    cdef dict preempt_cache              # select_victims' sorted running pods, per position
    # External filter and score for one place() call (e.g. esched.core._devices: exact
    # GPU-device fit, FGD); NULL otherwise. Set only for the duration of the call.
    cdef const uint8_t* ext_mask         # [node] 0 = infeasible
    cdef const int64_t* ext_score        # [node] added to the total of a feasible node
    cdef const int64_t* ext_rank         # [node] tie order: the smallest rank wins (NULL: seeded draw)

    # Measured load (the Usage plugin), kept only when some profile has it: the state's
    # fresh reports (ClusterState.usage_rows) as of usage_seen, and per profile its
    # Usage filter (columns and percents; phot_n 0: the profile does not filter).
    cdef bint any_usage
    cdef long long usage_seen            # state.usage_gen of the copy; -1: none yet
    cdef object usage_np, measured_np    # int64 [node, n_res], uint8 [node]
    cdef list pusage                     # [profile] [(column, percent)] of its Usage filter
    cdef int phot_n[MAX_PROFILES]
    cdef Py_ssize_t phot_col[MAX_PROFILES][MAX_PLUGIN_RES]
    cdef long long phot_pct[MAX_PROFILES][MAX_PLUGIN_RES]
    cdef const units_t* usage_ptr
    cdef const uint8_t* measured_ptr

    # Inter-pod affinity and topology spread: the scratch of core/_topology_views.pyx
    # (topology_view fills the view's lists from it, topology_assume keeps it; sync
    # resets it).
    cdef dict ip_log                     # inter-pod: (lset, constraints key) -> (a class, [(node, sign)] assumed since sync, its terms or None)
    cdef dict ip_copies                  # (kind, matcher, key) -> counts with the assumptions
    cdef dict sp_counts                  # topology spread domain counts kept between pods (_spread_counts)
    cdef dict sp_by_matcher              # matcher -> [those entries] (topology_assume adds to them)
    cdef dict sp_views                   # id(spread terms) -> (them, class key, per check: entry, ...) (_spread_view)
    cdef dict ip_owner_pairs             # anti-affinity matcher -> {key} of assumed pods
    cdef object ip_hold                  # the arrays the last view's checks point into
    cdef IpCheck* ip_buf                 # the last view's checks
    cdef Py_ssize_t ip_cap
    cdef object sp_hold                  # the arrays the last view's spread checks point into
    cdef SpreadCheck* sp_buf             # the last view's topology spread checks
    cdef Py_ssize_t sp_cap
    cdef dict ip_scored_pairs            # (SCORED_*, matcher) -> {key} of assumed pods
    cdef object ips_hold                 # the arrays the last view's IpScore list points into
    cdef IpScore* ips_buf                # the last view's InterPodAffinity score keys
    cdef Py_ssize_t ips_cap
    cdef object soft_hold                # the arrays the last view's SoftSpread list points into
    cdef SoftSpread* soft_buf            # the last view's PodTopologySpread score constraints
    cdef Py_ssize_t soft_cap
    cdef uint8_t* soft_seen              # their normalization walk's scratch (SoftSpread.seen)
    cdef Py_ssize_t soft_seen_cap
    # (last: the fields above keep their offsets)
    cdef object cc_comp                  # the compiled form cc_from holds the pointers of
    cdef ClassConst cc_from              # its ClassConst fields (_view: classes sharing it copy)
    # The cache steps aside per class where its row does not pay (_slot_for, _judge_row).
    cdef public object class_miss_np
    cdef int64_t[::1] class_miss         # [class] misses of its row's visits since one paid
    cdef public object class_off_np
    cdef int64_t[::1] class_off          # [class] `walked` before which it takes no row
    cdef public object class_pause_np
    cdef int64_t[::1] class_pause        # [class] step-asides since its row last paid
    cdef public long long steps_aside    # rows given up because their visits kept missing
    cdef public long long returns        # rows taken again by classes that had stepped aside
    cdef ClassMemo classes               # the state's reused class ids, asked by _forget_classes

    cdef int _ports_assume(self, Py_ssize_t n, Py_ssize_t c, int sign) except -1
    cdef int _ports_width(self) except -1
    cdef void _soa_node(self, Py_ssize_t n, flag_t fl) noexcept
    cdef inline void _touch(self, Py_ssize_t n) noexcept
    cdef inline void _soa_used(self, Py_ssize_t n) noexcept
    cdef void _compact_node(self, Py_ssize_t n) noexcept
    cdef inline void _fit_node(self, Py_ssize_t n) noexcept
    cdef bint _by_limits(self, Py_ssize_t cid) except -1
    cdef inline void _ensure_synced(self)
    cdef int _forget_classes(self) except -1
    cdef int _sync_usage(self, bint reshaped) except -1
    cdef object _compile(self, Py_ssize_t cid)
    cdef int _cc_fill(self, comp, ClassConst* t) except -1
    cdef int _view(self, Py_ssize_t cid, ClassView* v, Py_ssize_t lset=*) except -1
    cdef int _select(self, int pi) except -1
    cdef Py_ssize_t _normalize(self, ClassView* v, Py_ssize_t start,
                               long long target, int32_t* feas=*,
                               long long* n_feas=*, long long* visited=*) noexcept
    cdef void _view_fb(self, ClassView* v) noexcept
    cdef score_t _plugin_score(self, Py_ssize_t n, const ClassView* v, int k,
                               Py_ssize_t cid) noexcept
    cdef score_t _total(self, Py_ssize_t n, const ClassView* v, Py_ssize_t cid) noexcept
    cdef score_t _python_total(self, Py_ssize_t n, const ClassView* v, Py_ssize_t cid) noexcept
    cdef inline score_t _node_total(self, Py_ssize_t n, const ClassView* v,
                                    Py_ssize_t cid) noexcept
    cdef inline bint _plugin_applies(self, int k, const ClassView* v) noexcept
    cdef void _new_epoch(self, int slot) noexcept
    cdef Py_ssize_t _slot_for(self, Py_ssize_t cid) noexcept
    cdef void _judge_row(self, Py_ssize_t cid, int slot, long long hits,
                         long long misses) noexcept
    cdef Py_ssize_t _place(self, Py_ssize_t cid, const ClassView* v, score_t* best_out,
                           long long* visited_out) noexcept
    cdef Py_ssize_t _scan_external(self, Py_ssize_t cid, const ClassView* v, Py_ssize_t start,
                                   long long target, score_t* best_out, long long* visited_out,
                                   Py_ssize_t* processed_out) noexcept
    cdef inline void _fused_block(self, const ClassView* v, Py_ssize_t n0, Py_ssize_t m,
                                  int32_t* out, esched_fbsum* sm) noexcept
    cdef Py_ssize_t _scan(self, Py_ssize_t cid, const ClassView* v, Py_ssize_t start,
                          long long target, int slot, score_t* best_out,
                          long long* visited_out, Py_ssize_t* processed_out) noexcept
    cdef int _grow_class_stats(self, Py_ssize_t n) except -1
    cdef void _assume(self, Py_ssize_t cid, Py_ssize_t n, int sign,
                      Py_ssize_t lset=*) noexcept
    cdef Py_ssize_t _lset_of(self, pod) except -2
    cdef Py_ssize_t _class_of(self, pod) except -1
    cdef void _unassume_pod(self, Py_ssize_t p) noexcept
    cdef void _pod_view(self, Py_ssize_t p, int sign) noexcept
