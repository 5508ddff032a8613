"""Queue trees from Volcano's hdrf annotations (``volcano.sh/hierarchy``,
``volcano.sh/hierarchy-weights``) under ``--queue-hierarchy annotations``."""

from __future__ import annotations

import pytest

from esched.core.queues import QueueSpec, QueueTree, deserved, hierarchy_specs

G = 10**9


def _q(name: str, hierarchy: str | None = None, weights: str | None = None, **kw) -> QueueSpec:
    return QueueSpec(name=name, hierarchy=hierarchy, hierarchy_weights=weights, **kw)


def test_parent_mode_leaves_the_queues_as_they_are():
    specs = [_q("a", "root/x/a", "1/2/3", parent="b", weight=4), _q("b")]
    assert hierarchy_specs(specs, "parent") == specs
    tree = QueueTree(hierarchy_specs(specs, "parent"))
    assert tree.parent["a"] == "b"


def test_annotations_build_intermediate_queues_with_the_path_weights():
    """``root/eng/prod`` with ``1/2/8``: an intermediate ``root/eng`` of weight 2 under
    root, ``prod`` of weight 8 under it; spec.parent and spec.weight not read."""
    specs = hierarchy_specs(
        [
            _q("prod", "root/eng/prod", "1/2/8", parent="elsewhere", weight=5),
            _q("dev", "root/eng/dev", "1/3/2"),
            _q("plain", weight=3),
        ],
        "annotations",
    )
    by = {s.name: s for s in specs}
    # "dev" comes first by name, so the intermediate queue takes its weight (3), as
    # Volcano's hdrf keeps the node the first job built.
    assert by["root/eng"].weight == 3 and by["root/eng"].parent is None
    assert (by["prod"].parent, by["prod"].weight) == ("root/eng", 8)
    assert (by["dev"].parent, by["dev"].weight) == ("root/eng", 2)
    assert (by["plain"].parent, by["plain"].weight) == (None, 3)
    tree = QueueTree(specs)
    assert tree.children[None] == ["plain", "root/eng"]
    assert tree.path("prod") == "root/eng/prod"
    assert tree.path("root/eng") == "root/eng"
    assert tree.path("plain") == "root/plain"


def test_a_queue_at_a_prefix_path_is_the_parent_and_bad_annotations_sit_under_root():
    specs = hierarchy_specs(
        [
            _q("eng", "root/eng", "1/4"),
            _q("prod", "root/eng/prod", "1/4/2"),
            _q("bad", "root/x/bad", "1/2"),  # weights do not match the path
            _q("dotted.name", "root/a.b/c", "1/1/1"),
        ],
        "annotations",
    )
    by = {s.name: s for s in specs}
    assert by["prod"].parent == "eng"
    assert by["bad"].parent is None and by["bad"].weight == 1
    # names are exact: a dot in a segment or a queue name is not a path separator
    assert by["dotted.name"].parent == "root/a.b"
    tree = QueueTree(specs)
    assert tree.parent["dotted.name"] == "root/a.b"
    assert not tree.problems


def test_unknown_hierarchy_mode_is_refused():
    with pytest.raises(ValueError):
        hierarchy_specs([_q("a")], "labels")


def test_hdrf_rescaling_case_shares_each_resource_over_the_annotated_tree():
    """volcano-sh/volcano pkg/scheduler/plugins/drf/hdrf_test.go, "rescaling test": one
    node of 10 CPU / 10G; root/sci (100/50) with 10 pods of 1 CPU + 1G, root/eng/dev
    (100/50/50) with 10 of 1 CPU, root/eng/prod (100/50/50) with 10 of 1G. Volcano
    allocates sci 5 CPU + 5G, dev 5 CPU, prod 5G: sci and eng split each resource
    half and half, and within eng dev takes the CPU and prod the memory. Those are
    the deserved shares here (deserved is the cap while others wait)."""
    specs = hierarchy_specs(
        [
            _q("root-sci", "root/sci", "100/50"),
            _q("root-eng-dev", "root/eng/dev", "100/50/50"),
            _q("root-eng-prod", "root/eng/prod", "100/50/50"),
        ],
        "annotations",
    )
    demand = {
        "root-sci": {"cpu": 10_000, "memory": 10 * G},
        "root-eng-dev": {"cpu": 10_000, "memory": 0},
        "root-eng-prod": {"cpu": 0, "memory": 10 * G},
    }
    fair = deserved(specs, {"cpu": 10_000, "memory": 10 * G}, demand)
    assert fair["root-sci"] == {"cpu": 5000, "memory": 5 * G}
    assert fair["root-eng-dev"] == {"cpu": 5000, "memory": 0}
    assert fair["root-eng-prod"] == {"cpu": 0, "memory": 5 * G}
    assert fair["root/eng"] == {"cpu": 5000, "memory": 5 * G}


def test_hdrf_blocking_nodes_case_shares_each_resource_over_the_annotated_tree():
    """volcano-sh/volcano pkg/scheduler/plugins/drf/hdrf_test.go, "blocking nodes
    test": one node of 30 CPU / 30G; root/pg1, root/pg2 (100/25) with 30 pods of 1
    CPU each, root/pg3/pg31 (100/25/50) 30 of 1 CPU, root/pg3/pg32 30 of 1G,
    root/pg4 (100/25) 30 of 1G. Volcano allocates pg1, pg2, pg31 10 CPU each and
    pg32, pg4 15G each: the CPU split three ways among the queues asking for it, the
    memory two ways."""
    leaves = {
        "root-pg1": ("root/pg1", "100/25", {"cpu": 30_000}),
        "root-pg2": ("root/pg2", "100/25", {"cpu": 30_000}),
        "root-pg3-pg31": ("root/pg3/pg31", "100/25/50", {"cpu": 30_000}),
        "root-pg3-pg32": ("root/pg3/pg32", "100/25/50", {"memory": 30 * G}),
        "root-pg4": ("root/pg4", "100/25", {"memory": 30 * G}),
    }
    specs = hierarchy_specs([_q(n, h, w) for n, (h, w, _d) in leaves.items()], "annotations")
    fair = deserved(
        specs, {"cpu": 30_000, "memory": 30 * G}, {n: d for n, (_h, _w, d) in leaves.items()}
    )
    assert {n: fair[n]["cpu"] for n in leaves} == {
        "root-pg1": 10_000,
        "root-pg2": 10_000,
        "root-pg3-pg31": 10_000,
        "root-pg3-pg32": 0,
        "root-pg4": 0,
    }
    assert {n: fair[n]["memory"] for n in leaves} == {
        "root-pg1": 0,
        "root-pg2": 0,
        "root-pg3-pg31": 0,
        "root-pg3-pg32": 15 * G,
        "root-pg4": 15 * G,
    }


def test_weights_at_each_level_of_the_annotations_apply():
    """``root/eng`` 2 vs ``root/sci`` 8, then prod 8 vs dev 2 inside each (Volcano's
    example/hierarchical-jobs queues) on 10 CPU, every queue asking for all of it."""
    specs = hierarchy_specs(
        [
            _q(f"root-{t}-{e}", f"root/{t}/{e}", f"1/{tw}/{ew}")
            for t, tw in (("eng", 2), ("sci", 8))
            for e, ew in (("prod", 8), ("dev", 2))
        ],
        "annotations",
    )
    demand = {s.name: {"cpu": 10_000} for s in specs if not s.name.startswith("root/")}
    fair = deserved(specs, {"cpu": 10_000}, demand)
    assert fair["root/eng"]["cpu"] == 2000 and fair["root/sci"]["cpu"] == 8000
    assert fair["root-eng-prod"]["cpu"] == 1600 and fair["root-eng-dev"]["cpu"] == 400
    assert fair["root-sci-prod"]["cpu"] == 6400 and fair["root-sci-dev"]["cpu"] == 1600
