"""The slots a replica's claims are assumed on (services/replica/_claims.pyx): kept
with each claim from its first renewal of the view on, they must give what looking
the names up in the state's indexes gives, whatever the fold did to those slots."""

from __future__ import annotations

from esched.services.replica._claims import claimed_slots


def _slots(claims, pod_keys, node_names, pod_index, node_index):
    """claimed_slots' answer with its arrays as lists."""
    pods, nodes, victims = claimed_slots(claims, pod_keys, node_names, pod_index, node_index)
    return pods.tolist(), nodes.tolist(), victims


def _lookup(claims, pod_index, node_index):
    """The rule the kept slots stand in for: each name looked up now."""
    pods, nodes, victims = [], [], []
    for bindings, evicted, _slots in claims:
        for pod, node, _devices in bindings:
            p, n = pod_index.get(pod), node_index.get(node)
            if p is not None and n is not None:
                pods.append(p)
                nodes.append(n)
        victims.extend(v for pod in evicted if (v := pod_index.get(pod)) is not None)
    return pods, nodes, victims


def test_kept_slots_match_a_lookup_after_removals_and_reused_slots():
    pod_keys: list[str | None] = ["ns/a", "ns/b", "ns/c"]
    node_names: list[str | None] = ["n0", "n1"]
    pod_index = {"ns/a": 0, "ns/b": 1, "ns/c": 2}
    node_index = {"n0": 0, "n1": 1}
    bindings = [
        [("ns/a", "n1", ())],  # stays as claimed
        [("ns/b", "n0", ())],  # its pod is removed and the slot reused by ns/d
        [("ns/c", "n1", ())],  # its node is removed
        [("ns/e", "n0", ())],  # not in the state at the first renewal, folded since
        [("ns/a", "n0", ()), ("ns/x", "n0", ())],  # a gang with a pod never seen
    ]
    claims = [(b, ["ns/c"] if k == 0 else [], []) for k, b in enumerate(bindings)]
    first = _slots(claims, pod_keys, node_names, pod_index, node_index)
    assert first == _lookup(claims, pod_index, node_index)
    assert [c[2] for c in claims] == [[0, 1], [1, 0], [2, 1], [-1, 0], [0, 0, -1, 0]]

    # The fold moves on: ns/b deleted and its slot taken by ns/d, node n1 removed,
    # ns/e added in a new slot.
    del pod_index["ns/b"]
    pod_keys[1] = "ns/d"
    pod_index["ns/d"] = 1
    del node_index["n1"]
    node_names[1] = None
    pod_keys.append("ns/e")
    pod_index["ns/e"] = 3

    got = _slots(claims, pod_keys, node_names, pod_index, node_index)
    assert got == _lookup(claims, pod_index, node_index)
    assert got == ([3, 0], [0, 0], [2])
    assert claims[3][2] == [3, 0]  # found since: kept for the next renewal


def test_kept_slots_are_used_while_the_state_names_the_binding_there():
    # Once kept, a slot is confirmed by the state's name at it, not looked up: names
    # equal to the state's but other objects (as decoded from the log) confirm it.
    pod_keys: list[str | None] = ["ns/" + "a", "ns/" + "b"]
    node_names: list[str | None] = ["n" + "0"]
    pod_index = {"ns/a": 0, "ns/b": 1}
    node_index = {"n0": 0}
    b = [("".join(["ns/", "b"]), "".join(["n", "0"]), ())]
    claims = [(b, (), [])]
    assert _slots(claims, pod_keys, node_names, pod_index, node_index) == ([1], [0], [])
    assert _slots(claims, pod_keys, node_names, {}, {}) == ([1], [0], [])
