"""Equivalence classes follow the live pods, not the log's history.

A class lives while a pod slot holds it (pending, bound or terminal until deleted) and
is released with its last holder; a later new class takes its id. Whatever is kept per
class id (the placer's compiled form, view memo and score-cache row, the bands, the
fold's spec memo entries naming the class, the inter-pod index's memoized terms) must
then be another class's: a long-lived placer and the bytes fold are checked against a
fresh placer on the same state while classes of other requests and constraints
alternate through one id.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from esched.core import ClassMemo, ClusterState, Placer
from esched.core._placer import EPOCH_BITS
from support.fold import EV, Log, commit, envelope, node, pod

ZONE = "topology.kubernetes.io/zone"


def _shape(name: str, kind: int) -> dict:
    """Kind 0: 3 CPUs in zone a; kind 1: 1 CPU in zone b, scored apart (other requests,
    other constraints: a stale compiled form or score row places it wrongly)."""
    if kind == 0:
        return pod(name, cpu="3", memory="1Gi", namespace="default", nodeSelector={ZONE: "a"})
    return pod(name, cpu="1", memory="2Gi", namespace="default", nodeSelector={ZONE: "b"})


_RES = [
    {"cpu": 3000, "memory": 1 << 30, "pods": 1},
    {"cpu": 1000, "memory": 2 << 30, "pods": 1},
]


class _Bytes:
    """Folds envelopes as stored bytes (``apply_payloads``: the spec memo's path)."""

    def __init__(self, st: ClusterState) -> None:
        self.st = st

    def __call__(self, etype: str, data: Any) -> None:
        self.st.apply_payloads([(self.st.position + 1, orjson.dumps(envelope(etype, data)))])


def _zoned_cluster() -> tuple[ClusterState, _Bytes]:
    """Eight nodes of 8 CPUs, four in zone a and four in zone b, with distinct memory
    so that no two nodes score alike; the state and its bytes fold."""
    st = ClusterState()
    fold = _Bytes(st)
    for i in range(8):
        fold(
            EV.NODE_ADDED,
            node(f"n{i}", cpu="8", memory=f"{16 + i}Gi", labels={ZONE: "ab"[i // 4]}),
        )
    return st, fold


def test_a_class_is_released_with_its_last_pod_and_its_id_taken_by_the_next_new_one() -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n0", labels={ZONE: "a"}))
    log(EV.POD_SUBMITTED, _shape("a", 0))
    log(EV.POD_SUBMITTED, _shape("b", 0))
    first = st.pod_class_id("default/a")
    assert st.pod_class_id("default/b") == first
    log(EV.POD_DELETED, {"metadata": {"name": "a", "namespace": "default"}})
    assert len(st.class_index) == 1  # b holds it
    log(EV.POD_SUCCEEDED, {"metadata": {"name": "b", "namespace": "default"}})
    assert len(st.class_index) == 1  # a terminal pod holds its class until deleted
    # a terminal pod replaced by a submit of another shape lets its class go (the new
    # class is made while the old one is still held: the next id)
    log(EV.POD_SUBMITTED, _shape("b", 1))
    second = st.pod_class_id("default/b")
    assert second != first and st.class_specs[first] is None
    assert list(st.class_index.values()) == [second]
    log(EV.POD_DELETED, {"metadata": {"name": "b", "namespace": "default"}})
    assert len(st.class_index) == 0 and st.class_specs[second] is None
    # the smallest released id first, its rows those of the new class
    log(EV.POD_SUBMITTED, _shape("c", 1))
    assert st.pod_class_id("default/c") == first
    assert st.class_specs[first]["requests"]["cpu"] == 1000
    assert st.class_requests()[first, st.res_index["cpu"]] == 1000
    assert st.n_classes == 2


def test_classes_alternating_through_one_id_never_see_each_others_memos() -> None:
    st, fold = _zoned_cluster()
    placer = Placer(st)  # long-lived, as a replica's: it must forget a reused id
    ids = set()
    for r in range(12):
        kind = r % 2
        keys = []
        for i in range(6):
            # a run: the same class placed within the cache's window, so it gets a row
            fold(EV.POD_SUBMITTED, _shape(f"r{r}-{i}", kind))
            key = f"default/r{r}-{i}"
            ids.add(st.pod_class_id(key))
            got = placer.place(key, assume=False)
            fresh = Placer(st).place(key, assume=False)
            assert got is not None and fresh is not None, (r, i)
            assert got[1] == fresh[1], (r, i, got, fresh)  # the best total
            assert Placer(st).fits(key, got[0]) == [], (r, i, got)
            assert st.node_labels[st.node_index[got[0]]][ZONE] == "ab"[kind]
            fold(EV.PLACEMENT_COMMITTED, commit((key, got[0], _RES[kind])))
            keys.append(key)
        for key in keys:
            ns, name = key.split("/")
            fold(EV.POD_DELETED, {"metadata": {"name": name, "namespace": ns}})
        assert len(st.class_index) == 0
    assert ids == {0}  # one id, twelve classes through it
    assert placer.stats()["placed"] == 72


def test_a_class_memo_drops_a_value_once_its_id_is_given_to_a_new_class() -> None:
    # ClassMemo is the one home of "a value derived from class c is valid only while c
    # names the class it was derived from": the pass's GPU requests, a replica's
    # requests and their JSON, Quincy's constraints, the bands and the placer's rows
    # are kept through it. A released id keeps its value until a new class takes it
    # (nothing can ask for it meanwhile); then every look drops it, and only it.
    st, fold = _zoned_cluster()
    fold(EV.POD_SUBMITTED, _shape("x", 0))
    fold(EV.POD_SUBMITTED, _shape("keep", 1))
    x, keep = st.pod_class_id("default/x"), st.pod_class_id("default/keep")
    memo, rows = ClassMemo(st), ClassMemo(st)
    memo.put(x, "x's")
    memo.put(keep, "keep's")
    assert memo.reused() is None and rows.reused() is None
    fold(EV.POD_DELETED, {"metadata": {"name": "x", "namespace": "default"}})
    assert memo.get(x) == "x's"  # (released, not yet reused: nothing asks for it)
    fold(EV.POD_SUBMITTED, pod("y", cpu="2", memory="1Gi", namespace="default"))
    assert st.pod_class_id("default/y") == x  # y's new class takes x's id
    assert memo.get(x) is None  # x's value is not y's
    assert memo.values() == {keep: "keep's"}
    assert rows.reused() == [x]  # a keeper of rows is told once
    assert rows.reused() is None
    memo.put(x, "y's")
    assert memo.get(x) == "y's"
    assert memo.on(st) is memo
    other = memo.on(ClusterState())
    assert other is not memo and other.values() == {}


def _reuse_after_changes(changes: int) -> tuple[Placer, ClusterState, str]:
    """Class X (kind 0) fills cache row 0 and is released; Y (kind 1) takes its id; the
    row sees ``changes`` more changes of class (nodes untouched: every placement here
    assumes nothing); Y's first pod begins its run. The placer is left where Y's next
    pod takes row 0 back."""
    st, fold = _zoned_cluster()
    placer = Placer(st)
    for i in range(3):
        # a run: the second pod takes row 0 (epoch 1) and fills it, the third reads it
        fold(EV.POD_SUBMITTED, _shape(f"x{i}", 0))
        assert placer.place(f"default/x{i}", assume=False) is not None
    assert placer.hits > 0
    x = st.pod_class_id("default/x0")
    for i in range(3):
        fold(EV.POD_DELETED, {"metadata": {"name": f"x{i}", "namespace": "default"}})
    for i in range(2):
        fold(EV.POD_SUBMITTED, _shape(f"y{i}", 1))
    assert st.pod_class_id("default/y0") == x
    placer.sync()  # X's row released with its id (epoch 2)
    placer.release_cache_rows(changes)
    assert placer.place("default/y0", assume=False) is not None  # (a run begins: no row)
    return placer, st, "default/y1"


@pytest.mark.parametrize("bits", [EPOCH_BITS, EPOCH_BITS + 1, EPOCH_BITS + 2])
def test_no_count_of_class_changes_revives_an_older_class_s_cache_entries(bits: int) -> None:
    # A row's entries carry its epoch; X's were written at epoch 1 and Y takes the row
    # at epoch 3 + changes: the changes around 2**bits bring that count round to 1
    # modulo 2**bits, wherever the stamps' epoch bits end. X's entries on the nodes
    # untouched since must still be dead: Y (other requests, the other zone) is
    # scored afresh, as a placer without a cache scores it.
    for changes in range((1 << bits) - 3, (1 << bits) + 1):
        placer, st, key = _reuse_after_changes(changes)
        through_row = placer.hits + placer.misses
        got = placer.place(key, assume=False)
        assert placer.hits + placer.misses > through_row, changes  # Y's pod used row 0
        fresh = Placer(st, cache=False).place(key, assume=False)
        assert got == fresh, (changes, got, fresh)
        assert got is not None and st.node_labels[st.node_index[got[0]]][ZONE] == "b"
