"""The fold's bytes path (``apply_payloads``) against its dict path (``apply_many``).

Replay folds stored envelope bytes without decoding each into dicts first; it must
reach exactly the state the dict path (what the schedulers fold live) reaches, and
fail exactly as the dict path fails on bad input.
"""

import itertools
import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esched.core import ClusterState, PositionError
from esched.core._fold_bytes import _py_scanner_accepts
from esched.schemas.events import DEFAULT_NAMESPACE, namespaced_key
from esched.services.synth import cluster_log
from support.fold import EV, commit, envelope, node, pod, ref

from .test_snapshot import observe, random_log

GI = 2**30


def _fold_both(payloads: list[bytes]) -> tuple[ClusterState, ClusterState]:
    rows = list(enumerate(payloads, 1))
    by_dict = ClusterState()
    by_dict.apply_many([(p, orjson.loads(b)) for p, b in rows])
    by_bytes = ClusterState()
    assert by_bytes.apply_payloads(rows) == len(rows)
    return by_dict, by_bytes


def _assert_same(a: ClusterState, b: ClusterState) -> None:
    assert observe(b) == observe(a)
    assert b.class_specs == a.class_specs
    assert b.to_bytes() == a.to_bytes()


def _plain(
    name: str, cpu: str = "250m", memory: str = "1.5Gi", namespace: str | None = "ns", **spec_extra
) -> dict:
    """A pod without labels or annotations, the bulk of a real log."""
    p = pod(name, cpu=cpu, memory=memory, **spec_extra)
    p["metadata"] = {"name": name, "namespace": namespace}
    return p


def varied_log() -> list[bytes]:
    """Every event type, the shapes the bytes path decodes itself and the ones it
    hands to the dict path, unknown fields, odd bodies and quantity notations."""
    ev: list[dict] = []
    add = ev.append
    gpu_taint = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    add(
        envelope(
            EV.NODE_ADDED,
            node("n1", cpu="16", memory="64Gi", labels={"zone": "a"}, **{"nvidia.com/gpu": "4"}),
        )
    )
    add(envelope(EV.NODE_ADDED, node("n2", cpu="1e3", memory="1.5Ti", taints=gpu_taint)))
    n3 = node("n3", cpu="8", labels={"volcano.sh/nodegroup-name": "g-a"})
    add(envelope(EV.NODE_ADDED, n3))
    add(envelope(EV.NODE_ADDED, node("n4", cpu="4")))
    add(envelope(EV.QUEUE_UPSERTED, {"metadata": {"name": "q1"}, "spec": {"weight": 2}}))
    add(
        envelope(
            EV.PODGROUP_SUBMITTED,
            {
                "metadata": {"name": "g1", "namespace": "ns"},
                "spec": {"minMember": 2, "queue": "q1"},
            },
        )
    )
    # Plain pods: the same spec twice (one class, decoded once), unknown fields
    # everywhere, quantities as strings and numbers, limits without requests.
    p = _plain("a")
    p["metadata"].update({"uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z"})
    p["spec"]["schedulerName"] = "esched"
    p["status"] = {"phase": "Pending"}
    e = envelope(EV.POD_SUBMITTED, p)
    e.update({"specversion": "1.0", "time": "2026-01-01T00:00:00Z", "traceparent": "00-x"})
    add(e)
    add(envelope(EV.POD_SUBMITTED, _plain("b")))
    add(envelope(EV.POD_SUBMITTED, _plain("c", cpu=None, memory=None)))
    numeric = _plain("d")
    numeric["spec"]["containers"][0]["resources"] = {"requests": {"cpu": 1e3, "memory": 2**40}}
    add(envelope(EV.POD_SUBMITTED, numeric))
    limits = _plain("e")
    limits["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "0.5", "nvidia.com/gpu": "1"}}
    add(envelope(EV.POD_SUBMITTED, limits))
    add(envelope(EV.POD_SUBMITTED, _plain("f", namespace=None)))
    nameless = _plain("g")
    del nameless["metadata"]["namespace"]
    add(envelope(EV.POD_SUBMITTED, nameless))
    # Pods with labels and annotations (queue, gang), constraints, priority.
    add(envelope(EV.POD_SUBMITTED, pod("g1-0", gang="g1")))
    add(envelope(EV.POD_SUBMITTED, pod("g1-1", gang="g1")))
    labelled = pod("h", queue=None)
    labelled["metadata"]["labels"] = {"volcano.sh/queue-name": "q1", "app": "web"}
    add(envelope(EV.POD_SUBMITTED, labelled))
    add(
        envelope(
            EV.POD_SUBMITTED,
            _plain(
                "i",
                nodeSelector={"zone": "a"},
                tolerations=[{"key": "gpu", "operator": "Exists"}],
                priorityClassName="system-cluster-critical",
            ),
        )
    )
    add(
        envelope(
            EV.POD_SUBMITTED,
            _plain(
                "j",
                priority=1000,
                initContainers=[{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
            ),
        )
    )
    add(envelope(EV.POD_SUBMITTED, _plain("k", nodeName="n4")))
    add(envelope(EV.POD_SUBMITTED, _plain("l", nodeName="nowhere")))
    gang_by_annotation = pod("m0", gang="solo")
    gang_by_annotation["metadata"]["annotations"]["scheduling.k8s.io/group-pod-num"] = "3"
    add(envelope(EV.POD_SUBMITTED, gang_by_annotation))
    # The same spec in q1 before and after q1 gains a node-group affinity: the class
    # must change with the queue (the bytes path caches classes per spec).
    add(envelope(EV.POD_SUBMITTED, pod("q-before", queue="q1")))
    add(envelope(EV.POD_SUBMITTED, _plain("b2")))
    add(
        envelope(
            EV.QUEUE_UPSERTED,
            {
                "metadata": {"name": "q1"},
                "spec": {
                    "weight": 2,
                    "affinity": {
                        "nodeGroupAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": ["g-a"]
                        }
                    },
                },
            },
        )
    )
    add(envelope(EV.POD_SUBMITTED, pod("q-after", queue="q1")))
    add(
        envelope(
            EV.QUEUE_UPSERTED,
            {
                "metadata": {"name": "default"},
                "spec": {
                    "affinity": {
                        "nodeGroupAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": ["g-a"]
                        }
                    }
                },
            },
        )
    )
    add(envelope(EV.POD_SUBMITTED, _plain("b3")))
    # A PodGroup's priorityClassName rewrites its pods' specs: a gang member with a
    # plain pod's spec must not get the plain pod's cached class, nor the reverse.
    add(
        envelope(
            EV.PODGROUP_SUBMITTED,
            {
                "metadata": {"name": "g2", "namespace": "ns"},
                "spec": {"minMember": 1, "priorityClassName": "system-node-critical"},
            },
        )
    )
    add(envelope(EV.POD_SUBMITTED, _plain("z0", cpu="500m", memory="1Gi")))
    g2 = pod("g2-0", gang="g2")
    g2["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "g2"
    add(envelope(EV.POD_SUBMITTED, g2))
    add(envelope(EV.POD_SUBMITTED, _plain("z1", cpu="500m", memory="1Gi")))
    # Commits: single, a gang's several bindings with extra keys, one without a pods
    # entry, an unknown pod, a pod already running, a binding without a node.
    add(
        envelope(
            EV.PLACEMENT_COMMITTED,
            commit(("ns/a", "n1", {"cpu": 250, "memory": 3 * GI // 2, "pods": 1})),
        )
    )
    c = commit(
        ("ns/g1-0", "n1", {"cpu": 500, "memory": GI, "pods": 1}),
        ("ns/g1-1", "n2", {"cpu": 500, "memory": GI, "pods": 1}),
        gang="ns/g1",
    )
    c["bindings"][0]["extra"] = {"why": "test"}
    add(envelope(EV.PLACEMENT_COMMITTED, c))
    add(envelope(EV.PLACEMENT_COMMITTED, commit(("ns/b", "n3", {"cpu": 250, "memory": GI}))))
    add(envelope(EV.PLACEMENT_COMMITTED, commit(("ns/nope", "n1", {"cpu": 1}))))
    add(envelope(EV.PLACEMENT_COMMITTED, commit(("ns/a", "n2", {"cpu": 1}))))
    add(envelope(EV.PLACEMENT_COMMITTED, {"bindings": [{"pod": "ns/c"}]}))
    add(envelope(EV.PLACEMENT_COMMITTED, {"bindings": None}))
    add(
        envelope(
            EV.PLACEMENT_COMMITTED,
            {
                "proposal": "p",
                "bindings": [
                    {
                        "pod": "ns/c",
                        "node": "n4",
                        "resources": {"cpu": 100, "memory": 1, "pods": 1},
                    },
                    {"pod": "ns/d", "node": "n1"},
                ],
            },
        )
    )
    # Everything else, through the dict path.
    add(
        envelope(
            EV.USAGE_REPORTED,
            {
                "nodes": [{"name": "n1", "usage": {"cpu": "1500m"}}],
                "pods": [{"pod": "ns/a", "usage": {"memory": "1.5Gi"}}],
            },
        )
    )
    add(envelope(EV.POD_EVICTED, {"pod": "ns/b", "node": "n3", "reason": "overload"}))
    add(envelope(EV.POD_REJECTED, {"pod": "ns/e", "reason": "quota"}))
    add(envelope(EV.GANG_RESERVED, {"gang": "ns/solo", "nodes": ["n4", "n9"], "message": "m"}))
    add(envelope(EV.PLACEMENT_PROPOSED, {"proposal": "p"}))
    add(envelope("esched.something.new", {"x": 1}))
    add(envelope(EV.POD_SUCCEEDED, ref("a")))
    add(envelope(EV.POD_FAILED, ref("g1-0")))
    add(envelope(EV.POD_DELETED, ref("c")))
    add(envelope(EV.POD_SUCCEEDED, {"metadata": {"name": "f", "namespace": None}}))
    add(envelope(EV.POD_SUCCEEDED, {"metadata": {"name": "g"}}))
    add(envelope(EV.POD_FAILED, ref("never-seen")))
    add(envelope(EV.POD_SUCCEEDED, {"metadata": None}))
    add(envelope(EV.POD_SUCCEEDED, {"metadata": {"name": 7}}))
    add(envelope(EV.POD_SUBMITTED, _plain("a", cpu="2")))  # resubmitted after it finished
    add(envelope(EV.POD_SUBMITTED, _plain("b")))  # resubmitted while Pending: updated
    add(envelope(EV.POD_DELETED, ref("early")))  # a delete before its submit
    add(envelope(EV.POD_SUBMITTED, _plain("early")))  # ... which it cancels
    add(envelope(EV.POD_SUBMITTED, "not an object"))
    add(
        envelope(
            EV.POD_SUBMITTED,
            {
                "metadata": {"name": "bad"},
                "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]},
            },
        )
    )
    add(envelope(EV.POD_SUBMITTED, {"metadata": "x", "spec": {}}))
    add(envelope(EV.NODE_UPDATED, node("n4", cpu="6")))
    add(envelope(EV.NODE_REMOVED, {"metadata": {"name": "n1"}}))
    add(envelope(EV.POD_SUBMITTED, _plain("pöd")))  # not ASCII: the dict path
    add(envelope(EV.POD_SUBMITTED, _plain('quo"te')))  # an escape: the dict path
    payloads = [orjson.dumps(e) for e in ev]
    # The same events pretty-printed, once more at later positions of the log.
    payloads += [orjson.dumps(e, option=orjson.OPT_INDENT_2) for e in ev[6:12]]
    # Hand-written: duplicate keys (the last wins, as in orjson), spaces, a type after
    # its data, an exponent in an ignored field.
    payloads += [
        b'{"data": {"metadata": {"name": "x", "name": "dup", "namespace": "ns"}, "spec": '
        b'{"containers": []}}, "type": "esched.pod.submitted"}',
        b' \t{"type":"esched.pod.submitted","type":"esched.pod.submitted","data":{"spec":'
        b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}]},"metadata":{"name":"y"}},'
        b'"sequence":1e3}\r\n',
        b'{"type": "esched.placement.committed", "data": {"bindings": [{"pod": "ns/x", '
        b'"node": "n2", "resources": {"cpu": 1, "cpu": 2}}]}}',
    ]
    return payloads


def test_bytes_path_folds_a_varied_log_to_the_dict_paths_state():
    a, b = _fold_both(varied_log())
    _assert_same(a, b)
    # The log exercised what it meant to: both paths saw the odd events.
    assert {
        "malformed",
        "unknown_type",
        "invalid_pod",
        "unknown_pod",
        "submit_after_delete",
        "commit_unknown_pod",
    } <= set(b.anomalies)
    assert b.n_classes > 5 and b.n_gangs >= 2 and b.n_queues >= 2


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 300), indent=st.booleans())
def test_bytes_path_folds_random_logs_to_the_dict_paths_state(seed, n, indent):
    option = orjson.OPT_INDENT_2 if indent else None
    events = random_log(seed, n)
    for _pos, e in events:
        # Half the pods the way most logs carry them: no annotations at all.
        meta = (e.get("data") or {}).get("metadata") or {}
        if e["type"] == EV.POD_SUBMITTED and not meta.get("annotations"):
            meta.pop("annotations", None)
    _assert_same(*_fold_both([orjson.dumps(e, option=option) for _p, e in events]))


def test_synthetic_log_takes_the_bytes_path_and_folds_the_same():
    events = list(itertools.islice(cluster_log(50, pods=2000), 2000))
    payloads = [orjson.dumps(e) for e in events]
    assert all(_py_scanner_accepts(p) for p in payloads)
    _assert_same(*_fold_both(payloads))


@pytest.mark.parametrize(
    "bad",
    [
        b'{"type": "esched.pod.submitted", "data": {',
        b'{"type": "esched.pod.submitted", "data": {}} trailing',
        b'{"type": "esched.pod.submitted", "data": {"spec": {"priority": 1e999}}}',
        b'\xef\xbb\xbf{"type": "esched.pod.succeeded", "data": {}}',
        b'{"type": "esched.pod.succeeded", "data": {"metadata": {"name": "\xff"}}}',
        b"",
    ],
)
def test_bytes_path_counts_bad_json_as_undecodable(bad):
    # The fold is total: bytes that are not JSON (only tampering puts them in a log
    # whose writers validate) are counted at their position, never raised.
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(bad)
    state = ClusterState()
    state.apply_payloads([(1, bad)])
    assert state.position == 1
    assert state.anomalies == {"undecodable": 1}
    assert state.anomaly_first == {"undecodable": 1}


def test_bytes_path_and_dict_path_count_a_non_object_envelope_alike():
    ok = orjson.dumps(envelope(EV.POD_SUCCEEDED, ref("a")))
    a = ClusterState()
    a.apply_many([(1, orjson.loads(b"[1, 2]"))])
    b = ClusterState()
    b.apply_payloads([(1, b"[1, 2]")])
    assert a.anomalies == b.anomalies == {"undecodable": 1}
    state = ClusterState()
    state.apply_payloads([(5, ok)])
    with pytest.raises(PositionError):
        state.apply_payloads([(5, ok)])


def test_bytes_path_takes_str_payloads_like_the_dict_path():
    payload = orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))
    a, b = ClusterState(), ClusterState()
    a.apply_payloads([(1, payload)])
    b.apply_payloads([(1, payload.decode())])
    _assert_same(a, b)


@pytest.mark.parametrize(
    "payload, accepted",
    [
        (b'{"a": [1, -2, 0.5, true, false, null, {}, []], "b": "x y"}', True),
        (b'  {"a": 1}\n', True),
        (b'{"a": 1e3}', False),  # exponents: orjson may refuse (1e999) or round
        (b'{"a": 12345678901234567890}', False),  # beyond int64: orjson makes a float
        (b'{"a": "\\n"}', False),  # escapes are decoded by orjson
        (b'{"a": "\xc3\xa9"}', False),  # UTF-8 is validated by orjson
        (b'{"a": "\x01"}', False),
        (b'{"a": 01}', False),
        (b'{"a": 1.}', False),
        (b'{"a": -}', False),
        (b'{"a": tru}', False),
        (b'{"a": 1,}', False),
        (b'{"a" 1}', False),
        (b'{"a": 1} {}', False),
        (b"[1]", False),
        (b'{"a": [1, 2}', False),
        (b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}", False),
    ],
)
def test_scanner_accepts_only_plain_json_objects(payload, accepted):
    assert _py_scanner_accepts(payload) is accepted
    if accepted:
        assert isinstance(orjson.loads(payload), dict)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_scanner_never_accepts_what_orjson_refuses(data):
    # Mutations of a real envelope: drop, insert or change single bytes.
    base = bytearray(
        orjson.dumps(
            envelope(
                EV.PLACEMENT_COMMITTED,
                commit(("ns/a", "n1", {"cpu": 250, "memory": -1, "pods": 1.5})),
            )
        )
    )
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(base))
        op = rng.random()
        if op < 0.3:
            del base[i]
        elif op < 0.6:
            base.insert(i, rng.choice(b'{}[]",:.-+eE0129 \\tnull\xc3'))
        else:
            base[i] = rng.randrange(256)
    payload = bytes(base)
    if _py_scanner_accepts(payload):
        assert isinstance(orjson.loads(payload), dict)


@pytest.mark.parametrize("bad", [b"\x00", b"\x1f", b"\\", b"\x7f\x80", b"\xc3\xa9", b'"'])
def test_scanner_finds_a_special_byte_at_any_offset_of_a_string(bad):
    # Strings are scanned eight bytes at a time: a byte that ends the string or makes
    # the document orjson's business must be seen wherever it falls in a word.
    for before in range(0, 20):
        for after in range(0, 12):
            text = b"x" * before + bad + b"y" * after
            payload = b'{"type": "' + text + b'", "data": {}}'
            assert _py_scanner_accepts(payload) is False, payload
            plain = b'{"type": "' + b"x" * (before + after) + b'", "data": {}}'
            assert _py_scanner_accepts(plain) is True, plain


def test_bytes_path_keys_pods_as_the_dict_path_does():
    # The bytes path builds "namespace/name" from the raw bytes; absent and empty
    # namespaces are "default", an absent name is "", odd types go to the dict path.
    metas = [
        {"name": "a", "namespace": "ns"},
        {"name": "b"},
        {"name": "c", "namespace": ""},
        {"namespace": "ns"},
        {},
        {"name": "d", "namespace": None},
        {"name": 5},
        {"name": "e", "namespace": "ns", "labels": {}},
    ]
    events = [envelope(EV.NODE_ADDED, node("n1", cpu="64", memory="256Gi"))]
    for m in metas:
        body = _plain("x")
        body["metadata"] = m
        events.append(envelope(EV.POD_SUBMITTED, body))
    for m in metas:
        events.append(envelope(EV.POD_SUCCEEDED, {"metadata": m}))
    a, b = _fold_both([orjson.dumps(e) for e in events])
    _assert_same(a, b)
    assert sorted(k for k in b.pod_index) == sorted(
        ["ns/a", "default/b", "default/c", "ns/", "default/", "default/d", "default/5", "ns/e"]
    )
    assert b.anomalies.get("unknown_pod", 0) == 0


def test_bytes_path_skips_brackets_and_braces_inside_strings():
    # The walker of accepted documents finds a container's end by counting brackets
    # outside strings: strings full of them, at every offset of an 8-byte word.
    events = [envelope(EV.NODE_ADDED, node("n1", cpu="64", memory="256Gi"))]
    for i in range(12):
        odd = "x" * i + "{[}]" + "]}" * (i % 3)
        body = _plain(f"p{i}")
        body["spec"]["containers"][0]["name"] = odd
        body["spec"]["extra"] = [{"k": odd}, [odd, 1], {}]
        events.append(envelope(EV.POD_SUBMITTED, body))
        c = commit((f"ns/p{i}", "n1", {"cpu": 250, "memory": GI, "pods": 1}))
        c["proposal"] = odd
        c["victims"] = [{"note": odd}]
        c["bindings"][0]["note"] = [odd, {"a": odd}]
        events.append(envelope(EV.PLACEMENT_COMMITTED, c))
    payloads = [orjson.dumps(e) for e in events]
    assert all(_py_scanner_accepts(p) for p in payloads)
    a, b = _fold_both(payloads)
    _assert_same(a, b)
    assert b.summary()["pods"]["Running"] == 12


@pytest.mark.parametrize("namespace", ["absent", None, "", "team-a"])
def test_both_paths_key_pods_by_the_schemas_key_rule(namespace: str | None) -> None:
    meta = {"name": "p"} if namespace == "absent" else {"name": "p", "namespace": namespace}
    submitted = _plain("p")
    submitted["metadata"] = meta
    payloads = [orjson.dumps(envelope(EV.POD_SUBMITTED, submitted))]
    key = namespaced_key(meta.get("namespace"), "p")
    assert key == ("team-a/p" if namespace == "team-a" else f"{DEFAULT_NAMESPACE}/p")
    for state in _fold_both(payloads):
        assert list(state.pod_index) == [key]
    # Finishing handlers build the same key: the pod is found and freed.
    payloads.append(orjson.dumps(envelope(EV.POD_DELETED, {"metadata": meta})))
    for state in _fold_both(payloads):
        assert not state.pod_index and not state.anomalies


@pytest.mark.parametrize(
    "resources",
    [
        {"cpu": 250, "memory": GI, "pods": 1},
        {"memory": GI, "cpu": 250},  # no pods entry: the pod still takes a slot
        {"pods": 2, "cpu": 0},
        {"cpu": 250, "cpu ": 1},  # a name not registered yet: the general path registers it
        {"example.com/foo": 3},
        {"cpu": 250.0},  # not an integer literal
        {"cpu": -1},
        {"cpu": 2**62},  # beyond the core's per-quantity range
        {"cpu": "250"},
        {},
        {f"r{i}": 1 for i in range(20)},  # more names than the common path takes
    ],
)
def test_common_commit_path_folds_as_the_dict_path_does(resources: dict) -> None:
    # One binding of a known Pending pod: the shape _commit_one folds without Python
    # objects; every odd value in it must still fold exactly as the dict path does.
    events = [
        envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi")),
        envelope(EV.POD_SUBMITTED, _plain("a")),
        envelope(EV.POD_SUBMITTED, _plain("b")),
        envelope(EV.PLACEMENT_COMMITTED, commit(("ns/a", "n1", resources))),
        envelope(EV.PLACEMENT_COMMITTED, commit(("ns/b", "n1", {"cpu": 1, "memory": 2}))),
    ]
    _assert_same(*_fold_both([orjson.dumps(e) for e in events]))


def test_common_commit_path_keeps_the_last_of_repeated_resource_names() -> None:
    # orjson keeps the last value of a repeated key; so must the bytes path.
    payloads = [
        orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi"))),
        orjson.dumps(envelope(EV.POD_SUBMITTED, _plain("a"))),
        b'{"type":"esched.placement.committed","data":{"bindings":[{"pod":"ns/a",'
        b'"node":"n1","resources":{"cpu":100,"memory":5,"cpu":300,"pods":1}}]}}',
    ]
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    assert by_bytes.pod("ns/a")["allocated"]["cpu"] == 300


@pytest.mark.parametrize(
    "data",
    [
        # The binding read in the one walk over the data, wherever its members are.
        b'{"bindings":[{"resources":{"cpu":7},"node":"n1","pod":"ns/a"}],"proposal":"p"}',
        b'{ "bindings" : [ { "pod" : "ns/a" , "node" : "n1" , "resources" : { "cpu" : 7 } } ] }',
        b'{"bindings":[{"pod":"ns/a","node":"n1","resources":{ }}]}',
        b'{"bindings":[{"pod":"ns/a","x":{"y":[1,"]"]},"node":"n1","resources":{"cpu":7}}]}',
        # A repeated member: the last counts, as orjson keeps it.
        b'{"bindings":[{"pod":"ns/b","node":"n1","resources":{"cpu":1}}],'
        b'"bindings":[{"pod":"ns/a","node":"n1","resources":{"cpu":7}}]}',
        b'{"bindings":[{"pod":"ns/a","node":"n1","resources":{"cpu":1},"resources":{"memory":7}}]}',
        b'{"bindings":[{"pod":"ns/a","pod":"ns/b","node":"n1","resources":{"cpu":7}}]}',
        # Shapes left to the general path.
        b'{"bindings":[{"pod":"ns/a","node":"n1","resources":{"cpu":7}},'
        b'{"pod":"ns/b","node":"n1","resources":{"cpu":7}}]}',
        b'{"bindings":[{"pod":"ns/a","node":"n1","resources":{"cpu":7.5}}]}',
        b'{"bindings":[{"pod":"ns/a","node":"n1","resources":{"cpu":-7}}]}',
        b'{"bindings":[{"pod":"ns/a","node":"n1","resources":[]}]}',
        b'{"bindings":[{"pod":1,"node":"n1","resources":{"cpu":7}}]}',
        b'{"bindings":[]}',
        b'{"bindings":{}}',
        b'{"bindings":null}',
        b'{"proposal":"p"}',
    ],
)
def test_common_commit_path_reads_its_binding_in_one_walk_as_the_dict_path_does(
    data: bytes,
) -> None:
    payloads = [
        orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi"))),
        orjson.dumps(envelope(EV.POD_SUBMITTED, _plain("a"))),
        orjson.dumps(envelope(EV.POD_SUBMITTED, _plain("b"))),
        b'{"type":"esched.placement.committed","data":' + data + b"}",
    ]
    assert _py_scanner_accepts(payloads[-1])
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    assert by_bytes.anomalies == by_dict.anomalies


_SPEC_A = b'{"containers":[{"resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]}'
_SPEC_B = b'{"containers":[{"resources":{"requests":{"cpu":"2","memory":"2Gi"}}}]}'
_BIND_A = b'{"bindings":[{"pod":"ns/a","node":"n1","resources":{"cpu":7}}]}'


@pytest.mark.parametrize(
    "tail",
    [
        # The scanner notes the data object's metadata, spec and bindings in its walk
        # (the last of each, of the last data member, as orjson keeps them).
        b'"data":{"metadata":{"name":"b","namespace":"ns"},"spec":' + _SPEC_A + b"}",
        b'"data":{"spec":'
        + _SPEC_A
        + b',"metadata":{"name":"b","namespace":"ns"},"spec":'
        + _SPEC_B
        + b"}",
        b'"data":{"metadata":{"name":"x"},"spec":' + _SPEC_B + b',"metadata":{"name":"b",'
        b'"namespace":"ns"}}',
        b'"data":{"metadata":{"name":"x","namespace":"ns"},"spec":' + _SPEC_B + b'},"data":'
        b'{"metadata":{"name":"b","namespace":"ns"},"spec":' + _SPEC_A + b"}",
        b'"data":{"metadata":{"name":"x","namespace":"ns"},"spec":' + _SPEC_B + b'},"data":{}',
        b'"data":{"metadata":{"name":"x","namespace":"ns"},"spec":' + _SPEC_B + b'},"data":"s"',
        b'"data":{"metadata":{"name":"x","namespace":"ns"},"spec":' + _SPEC_B + b'},"data":null',
        b'"data":{"metadata":{"name":"x","namespace":"ns"},"spec":'
        + _SPEC_B
        + b'},"data":'
        + _BIND_A,
        b'"data":{"spec":{"containers":[]},"metadata":{"name":"b","namespace":"ns"},'
        b'"x":{"spec":' + _SPEC_B + b',"metadata":{"name":"y"}}}',
        b'"data":' + _BIND_A,
        b'"data":{"bindings":[{"pod":"ns/b","node":"n1","resources":{"cpu":3}}]},"data":' + _BIND_A,
        b'"data":' + _BIND_A + b',"data":{"proposal":"p"}',
        b'"data":' + _BIND_A + b',"data":[1]',
        b'"data":{"bindings":null,"x":' + _BIND_A + b"}",
    ],
)
@pytest.mark.parametrize("kind", [EV.POD_SUBMITTED, EV.PLACEMENT_COMMITTED, EV.POD_DELETED])
def test_repeated_data_and_members_fold_as_the_dict_path_does(kind: str, tail: bytes) -> None:
    payloads = [
        orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi"))),
        orjson.dumps(envelope(EV.POD_SUBMITTED, _plain("a"))),
        b'{"type":"' + kind.encode() + b'",' + tail + b"}",
        _commit_raw("b", "n1"),
    ]
    assert _py_scanner_accepts(payloads[2])
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    assert by_bytes.anomalies == by_dict.anomalies


@pytest.mark.parametrize(
    "bindings",
    [
        [{"pod": "ns/a", "node": "nope", "resources": {"cpu": 1}}],  # unknown node
        [{"pod": "ns/nope", "node": "n1", "resources": {"cpu": 1}}],  # unknown pod
        [{"pod": "ns/run", "node": "n1", "resources": {"cpu": 1}}],  # not Pending
        [{"pod": "ns/a", "node": "n1", "resources": {"cpu": 1}, "devices": [0]}],
        [{"pod": "ns/a", "node": "n1"}],  # no resources
        [{"pod": "ns/a", "node": "n1", "resources": {"cpu": 1}}] * 2,  # the same pod twice
        [{"pod": "ns/a", "node": "n1", "resources": {"cpu": 10**6, "pods": 1}}],  # overflow
    ],
)
def test_commits_the_common_path_declines_fold_as_the_dict_path_does(bindings) -> None:
    events = [
        envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi")),
        envelope(EV.POD_SUBMITTED, _plain("a")),
        envelope(EV.POD_SUBMITTED, _plain("run", node_name="n1")),
        envelope(EV.PLACEMENT_COMMITTED, {"proposal": "p", "bindings": bindings}),
    ]
    by_dict, by_bytes = _fold_both([orjson.dumps(e) for e in events])
    _assert_same(by_dict, by_bytes)
    assert by_bytes.anomalies == by_dict.anomalies


def test_common_commit_path_finds_pods_and_nodes_whose_slots_changed() -> None:
    # _commit_one finds its pod and node through a cache of the slot each name was
    # last found at, shared by every state: a slot since freed, reused by another
    # name, or another state's slot for the same name must fold as the dict path does.
    def commit_one(pod_name: str, node_name: str) -> dict:
        return envelope(EV.PLACEMENT_COMMITTED, commit((pod_name, node_name, {"cpu": 1})))

    deleted = {"metadata": {"name": "a", "namespace": "ns"}}
    events = [
        envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi")),
        envelope(EV.NODE_ADDED, node("n2", cpu="16", memory="64Gi")),
        envelope(EV.POD_SUBMITTED, _plain("a")),
        commit_one("ns/a", "n1"),
        envelope(EV.POD_DELETED, deleted),
        envelope(EV.POD_SUBMITTED, _plain("b")),  # takes ns/a's slot
        commit_one("ns/a", "n1"),  # the pod is gone: an anomaly
        envelope(EV.NODE_REMOVED, {"metadata": {"name": "n1"}}),
        envelope(EV.NODE_ADDED, node("n3", cpu="16", memory="64Gi")),  # takes n1's slot
        commit_one("ns/b", "n1"),  # the node is gone: an anomaly
        envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi")),  # a new slot
        commit_one("ns/b", "n1"),
        envelope(EV.POD_SUBMITTED, _plain("a")),  # a new slot
        commit_one("ns/a", "n2"),
    ]
    payloads = [orjson.dumps(e) for e in events]
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    assert by_bytes.anomalies == by_dict.anomalies
    assert by_bytes.anomalies == {"commit_unknown_pod": 1, "commit_unknown_node": 1}
    assert by_bytes.pod("ns/a")["node"] == "n2" and by_bytes.pod("ns/b")["node"] == "n1"
    # Another state, its pods and nodes in other slots than the states above had.
    other = [envelope(EV.NODE_ADDED, node("n0", cpu="16", memory="64Gi"))]
    other += [envelope(EV.POD_SUBMITTED, _plain(name)) for name in ("z", "b", "a")]
    _assert_same(*_fold_both([orjson.dumps(e) for e in other + events[:4]]))


def test_types_the_fold_only_counts_skip_their_data_and_fold_as_the_dict_path_does() -> None:
    """A Volcano Job's records (its whole spec, templates included) and the other
    types the fold only counts: the bytes path counts them without decoding their
    data, to the dict path's state and counts; an escaped type name still takes the
    dict path."""
    from esched.schemas import events as ev
    from esched.schemas.manifests import volcano_job_objects

    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": pod("x")}]},
    }
    objs = volcano_job_objects(job)
    update = {"job": "ns/j", "seq": 0, "phase": "Pending", "previous": "", "attempt": 0}
    events = [
        envelope(EV.NODE_ADDED, node("n1")),
        envelope(ev.JOB_SUBMITTED, objs[0][1]),
        envelope(ev.JOB_UPDATED, update),
        envelope(ev.PODGROUP_SUBMITTED, objs[1][1]),
        envelope(ev.POD_SUBMITTED, objs[2][1]),
        envelope(ev.JOB_TIMER, {"job": "ns/j", "due": "2030-01-01T00:00:00Z"}),
        envelope(ev.POD_UNSCHEDULABLE, {"pod": "ns/j-w-0", "reasons": {}, "message": ""}),
    ]
    payloads = [orjson.dumps(e) for e in events]
    payloads.append(payloads[2].replace(b"esched.job.updated", b"esched.job\\u002eupdated"))
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    counts = by_bytes.event_counts
    assert counts == by_dict.event_counts
    assert (counts[ev.JOB_SUBMITTED], counts[ev.JOB_UPDATED], counts[ev.JOB_TIMER]) == (1, 2, 1)


def _group(name: str, data: bytes) -> bytes:
    head = b'{"type":"esched.podgroup.submitted","id":"pg-' + name.encode()
    return head + b'","data":' + data + b"}"


# PodGroups: the bytes path decodes only the members _podgroup reads; every shape
# below folds as the dict path folds it, malformed ones and those it declines included.
_GROUPS = [
    b'{"metadata":{"name":"g0","namespace":"ns","annotations":{"volcano.sh/job-name":"j"},'
    b'"labels":{"a":"b"}},"spec":{"minMember":2,"queue":"q1","minTaskMember":{"w":2},'
    b'"minResources":{"cpu":"2","memory":"2Gi"},"priorityClassName":"high"},"status":{}}',
    b'{"metadata":{"name":"g1"},"spec":{"minMember":0}}',
    b'{"metadata":{"name":"g2","namespace":null},"spec":{"minMember":null,"queue":null}}',
    b'{"metadata":{"name":"g3","namespace":"ns"},"spec":{"minMember":1,"minMember":3,'
    b'"queue":"","queue":"q2"}}',
    b'{"metadata":{"name":"g4","namespace":"ns"}}',
    b'{"metadata":{"name":"g5","namespace":"ns"},"spec":{"minResources":{"cpu":"abc"}}}',
    b'{"metadata":{"name":"g6","namespace":"ns"},"spec":{"minMember":"x"}}',
    b'{"metadata":{"name":"g7","namespace":"ns"},"spec":{"minTaskMember":[1]}}',
    b'{"metadata":{"name":"g8","namespace":"ns"},"spec":{"minMember":1.5}}',
    b'{"metadata":null,"spec":{"minMember":1}}',
    b'{"metadata":{"name":"g9"},"spec":[]}',
    b'{"metadata":{"name":"g0","namespace":"ns"},"spec":{"minMember":1,"queue":"q1"}}',
    b"{}",
]


def test_podgroups_fold_from_their_bytes_as_the_dict_path_does() -> None:
    """A PodGroup (one per Volcano Job) is folded from the members its handler reads,
    to the dict path's state, counts and anomalies; one submitted again replaces it."""
    payloads = [_group(f"e{i}", g) for i, g in enumerate(_GROUPS)]
    payloads += [_submit("g0-0", _PLAIN_SPECS[0], b',"annotations":{"volcano.sh/group-name":"g0"}')]
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    assert by_bytes.event_counts == by_dict.event_counts
    assert by_bytes.anomalies == by_dict.anomalies and by_bytes.anomalies["malformed"] >= 2
    assert by_bytes.gang_min_member("ns/g0") == 1 and by_bytes.gang_min_member("ns/g3") == 3


# Labels and annotations: built from their bytes when every value is a string or a
# plain integer; any other shape is decoded as before. All fold as the dict path does.
_METAS = [
    b',"labels":{"app":"w","volcano.sh/job-name":"j"},"annotations":{"volcano.sh/queue-name":"q1",'
    b'"scheduling.k8s.io/group-name":"g0","volcano.sh/preemptable":"false"}',
    b',"labels":{},"annotations":{}',
    b',"labels":{"a":"1","a":"2"},"annotations":{"scheduling.k8s.io/group-name":"g0",'
    b'"scheduling.k8s.io/group-pod-num":3}',
    b',"labels":{"n":7,"m":-1},"annotations":{"x":1.5}',
    b',"labels":{"n":[1]},"annotations":{"y":{"z":"w"},"t":true,"u":null}',
    b',"labels":null,"annotations":"x"',
    b',"labels":{"n":123456789012345678}',
    # The annotations the fold reads among others it never decodes (a Job's pods).
    b',"annotations":{"volcano.sh/job-name":"j","scheduling.volcano.sh/queue-name":"q1",'
    b'"scheduling.volcano.sh/group-name":"g0","scheduling.k8s.io/group-pod-num":"2",'
    b'"volcano.sh/preemptable":"true","volcano.sh/task-index":"0"}',
    b',"annotations":{"scheduling.k8s.io/group-name":"g0","scheduling.k8s.io/group-pod-num":1.5,'
    b'"volcano.sh/job-version":{"a":1}}',
    b',"annotations":{"volcano.sh/job-name":"j"},"labels":{"volcano.sh/job-name":"j"}',
]


def test_labels_and_annotations_fold_from_their_bytes_as_the_dict_path_does() -> None:
    """A pod's labels and annotations (a Volcano Job's pods all have them) decoded
    from their bytes give the dict path's state, classes, counts and anomalies."""
    payloads = [_group("e0", _GROUPS[0])]
    payloads += [_submit(f"m{i}", _PLAIN_SPECS[0], m) for i, m in enumerate(_METAS)]
    by_dict, by_bytes = _fold_both(payloads)
    _assert_same(by_dict, by_bytes)
    assert by_bytes.event_counts == by_dict.event_counts
    assert by_bytes.anomalies == by_dict.anomalies


# Containers-only pod specs: the bytes path computes their class from the spec's
# bytes (no dicts); every shape below must fold as the dict path folds it, those it
# declines (limits, ports, numbers, repeated names, bad quantities) included.
_PLAIN_SPECS = [
    b'{"containers":[{"name":"c","resources":{"requests":{"cpu":"250m","memory":"1Gi"}}}]}',
    b'{"containers": [ {"image": "x", "name": "c", "resources": {"claims": [],'
    b' "requests": {"memory": "1Gi", "cpu": "250m"}}} ] }',
    b'{"containers":[{"name":"a","resources":{"requests":{"cpu":"1"}}},{"name":"b"},'
    b'{"name":"c","resources":null},{"name":"d","resources":{}},'
    b'{"name":"e","resources":{"requests":null}},{"name":"f","resources":{"requests":{}}},'
    b'{"name":"g","resources":{"claims":[]}},{"name":"h","resources":{"requests":{"cpu":"2"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1","cpu":"2"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],'
    b'"containers":[{"resources":{"requests":{"cpu":"3"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}},"resources":{"requests":{"cpu":"5"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"abc"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":2,"memory":"1Gi"}}}]}',
    b'{"containers":[{"resources":{"requests":{"memory":"4000000Ti"}}},'
    b'{"resources":{"requests":{"memory":"4000000Ti"}}}]}',
    b'{"containers":[{"resources":{"requests":{"memory":"99999999999999Ti"}}}]}',
    b'{"containers":[{"resources":{"requests":{"example.com/x":"3000000000000000000"}}},'
    b'{"resources":{"requests":{"example.com/x":"3000000000000000000"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"},"limits":{"cpu":"2"}}}]}',
    b'{"containers":[{"ports":[{"containerPort":80,"hostPort":80}],'
    b'"resources":{"requests":{"cpu":"1"}}}]}',
    b'{"containers":[{"resources":{"requests":{"pods":"3","cpu":"1","nvidia.com/gpu":"1"}}}]}',
    b'{"containers":[]}',
    b'{"containers":null}',
    b'{"containers":"x"}',
    b'{"containers":[1]}',
    b'{"containers":[{"resources":"x"}]}',
    b'{"containers":[{"resources":{"requests":[]}}]}',
    b"{}",
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"priority":5}',
    b'{"containers":[{"resources":{"requests":{"memory":"1Gi","cpu":"1","memory":"2Gi"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1.00000000000000000001","cpux":"1",'
    b'"memor":"1","memory":"+2Ki","c":"1"}}},{"resources":{"requests":{"memory":"3"}}}]}',
    b'{"containers":[{"resources":{"requests":{'
    + b",".join(b'"example.com/r%d":"%d"' % (r, r) for r in range(17))
    + b"}}}]}",
    b'{"containers":[{"resources":{"requests":{'
    + b",".join(b'"example.com/r%d":"%d"' % (r, r) for r in range(16))
    + b"}}}]}",
    # Containers with a profile and a restartPolicy (a Volcano Job's pods): still
    # read from the bytes, the profile part of the class; other values declined.
    b'{"containers":[{"name":"c","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}],'
    b'"schedulerName":"volcano","restartPolicy":"OnFailure"}',
    b'{"schedulerName":"volcano","containers":[{"resources":{"requests":{"cpu":"1"}}}]}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"schedulerName":""}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"schedulerName":5}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"schedulerName":null}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"schedulerName":"a",'
    b'"schedulerName":"b"}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"restartPolicy":null}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"schedulerName":"volcano",'
    b'"priorityClassName":"high"}',
    b'{"containers":[{"resources":{"requests":{"cpu":"1"}}}],"schedulerName":"volcano",'
    b'"nodeSelector":{}}',
    b'{"restartPolicy":"Never","schedulerName":"volcano"}',
]


def _submit(name: str, spec: bytes, meta: bytes = b"") -> bytes:
    return (
        b'{"type":"esched.pod.submitted","id":"s-' + name.encode() + b'","source":"t",'
        b'"data":{"metadata":{"name":"' + name.encode() + b'","namespace":"ns"' + meta + b"},"
        b'"spec":' + spec + b"}}"
    )


def _commit_raw(name: str, node_name: str) -> bytes:
    binding = (f"ns/{name}", node_name, {"cpu": 100, "pods": 1})
    return orjson.dumps(envelope(EV.PLACEMENT_COMMITTED, commit(binding)))


def test_containers_only_specs_fold_without_dicts_as_the_dict_path_does() -> None:
    ev = [
        orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="64", memory="256Gi"))),
        orjson.dumps(envelope(EV.QUEUE_UPSERTED, {"metadata": {"name": "q1"}})),
    ]
    queue_label = b',"labels":{"volcano.sh/queue-name":"q1"}'
    for i, spec in enumerate(_PLAIN_SPECS):
        # First seen by a plain pod (its class made from the bytes), then a memo hit,
        # then the same bytes for a labelled pod in another queue (decoded then), and
        # a plain pod again; one of them placed and resubmitted while running.
        ev.append(_submit(f"a{i}", spec))
        ev.append(_submit(f"b{i}", spec))
        ev.append(_submit(f"c{i}", spec, queue_label))
        ev.append(_submit(f"d{i}", spec))
        ev.append(_commit_raw(f"a{i}", "n1"))
        ev.append(_submit(f"a{i}", spec))
    # A new spec first seen by a running pod's resubmission makes no class.
    ev.append(_submit("a0", b'{"containers":[{"resources":{"requests":{"cpu":"7"}}}]}'))
    deleted = {"metadata": {"name": "z", "namespace": "ns"}}
    ev.append(orjson.dumps(envelope(EV.POD_DELETED, deleted)))
    ev.append(_submit("z", _PLAIN_SPECS[0]))
    # A node-group affinity of the default queue, then a PriorityClass: both are part
    # of a plain pod's class; specs seen before and new ones after each.
    group = {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g-a"]}}
    for queue_spec in ({"affinity": group}, {}):
        default_queue = {"metadata": {"name": "default"}, "spec": queue_spec}
        ev.append(orjson.dumps(envelope(EV.QUEUE_UPSERTED, default_queue)))
        for i, spec in enumerate(_PLAIN_SPECS):
            ev.append(_submit(f"f{i}-{len(ev)}", spec))
            ev.append(_submit(f"g{i}-{len(ev)}", spec.replace(b'"1"', b'"11"')))
    high = {"metadata": {"name": "hi"}, "value": 7, "globalDefault": True}
    ev.append(orjson.dumps(envelope(EV.PRIORITYCLASS_UPSERTED, high)))
    for i, spec in enumerate(_PLAIN_SPECS):
        ev.append(_submit(f"e{i}", spec))
        ev.append(_submit(f"h{i}", spec.replace(b'"1"', b'"12"')))
    assert all(_py_scanner_accepts(p) for p in ev)
    a, b = _fold_both(ev)
    _assert_same(a, b)
    assert b.pod_index.keys() == a.pod_index.keys()
    assert [b.pod(k)["class"] for k in b.pod_index] == [a.pod(k)["class"] for k in a.pod_index]
    assert {"invalid_pod", "overflow", "resubmitted_running_pod", "submit_after_delete"} <= set(
        b.anomalies
    )


@settings(max_examples=60, deadline=None)
@given(
    containers=st.lists(
        st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(["cpu", "memory", "pods", "example.com/x"]),
                st.sampled_from(["1", "250m", "0", "1Gi", "1.5", "-1", "x", "9e18", "1e3"]),
                max_size=4,
            ),
        ),
        max_size=4,
    ),
    seen=st.booleans(),
)
def test_random_containers_only_specs_fold_as_the_dict_path_does(containers, seen) -> None:
    spec = {
        "containers": [
            {"name": f"c{i}"} if r is None else {"name": f"c{i}", "resources": {"requests": r}}
            for i, r in enumerate(containers)
        ]
    }
    raw = orjson.dumps(spec)
    ev = [orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))]
    if seen:  # a class the state already has
        ev.append(_submit("x", raw.replace(b'"c0"', b'"other"')))
    ev += [_submit("p", raw), _submit("q", raw)]
    _assert_same(*_fold_both(ev))


_SEEN_SPEC = (
    b'{"containers":[{"name":"main","resources":{"requests":{"cpu":"2500m","memory":"6912Mi"}}}]}'
)


@pytest.mark.parametrize(
    "spec",
    [
        _SEEN_SPEC + b',"x":1',  # a valid member after it
        _SEEN_SPEC + b',"spec":' + _SEEN_SPEC,  # repeated
        _SEEN_SPEC + b',"spec":{"containers":[]}',
        _SEEN_SPEC + b',"metadata":{"name":"m","namespace":"ns"}',
        _SEEN_SPEC + b" ",
        _SEEN_SPEC + b"}",  # one brace too many
        _SEEN_SPEC[:-1],  # one too few
        _SEEN_SPEC[:-2] + b"}",
        _SEEN_SPEC + b",",
        _SEEN_SPEC + b',"x":1e999',
        _SEEN_SPEC + b',"x":"\\u00e9"',
        _SEEN_SPEC.replace(b"6912Mi", b"6912Mi\\u0000"),
        _SEEN_SPEC.replace(b"6912Mi", b"6912M\xc3\xa9"),
        _SEEN_SPEC.replace(b":", b": "),
        b'{"containers":[]},"spec":' + _SEEN_SPEC,
        b'{"a":' * 70 + b"1" + b"}" * 70,  # deeper than the scanner goes
    ],
)
def test_specs_taken_unchecked_are_proven_before_they_fold(spec: bytes) -> None:
    # The scan takes a submission's spec unchecked to the envelope's "}}" and proves
    # it by the spec memo's bytes (or scans it): what is not the memo's bytes, a valid
    # spec, is scanned as before, and anything else goes the dict path's way.
    assert_same_as_decoded(
        [
            orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi"))),
            _submit("seen", _SEEN_SPEC),
            _submit("p", spec),
            _submit("q", _SEEN_SPEC),
        ]
    )


def assert_same_as_decoded(payloads: list[bytes]) -> ClusterState:
    """The bytes path against every payload decoded whole (apply_payloads hands any
    payload other than bytes to orjson.loads, as the dict path folds it, bad JSON
    counted as undecodable); the decoded fold's state."""
    rows = list(enumerate(payloads, 1))
    decoded = ClusterState()
    decoded.apply_payloads([(p, bytearray(b)) for p, b in rows])
    by_bytes = ClusterState()
    by_bytes.apply_payloads(rows)
    _assert_same(decoded, by_bytes)
    assert by_bytes.anomalies == decoded.anomalies
    return decoded


def test_truncated_and_mutated_specs_fold_as_the_dict_path_does() -> None:
    # Every cut of a submission whose spec the memo holds, closed by the "}}" the
    # scan looks for or not, and every byte of its spec changed to a JSON token's.
    whole = _submit("p", _SEEN_SPEC)
    start = whole.index(b'"spec":') + 7
    ev = [
        orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi"))),
        _submit("seen", _SEEN_SPEC),
    ]
    for cut in range(start, len(whole)):
        ev += [whole[:cut], whole[:cut] + b"}}", whole[:cut] + b"}}}"]
    for i in range(start, len(whole) - 2):
        for byte in b'{}[]",: \\0a\x00\x80':
            mutant = bytearray(_submit(f"m{i}-{byte}", _SEEN_SPEC))
            mutant[i + len(mutant) - len(whole)] = byte
            ev.append(bytes(mutant))
    decoded = assert_same_as_decoded(ev)
    assert decoded.anomalies["undecodable"] > 500


def _bare_submit(name: str, namespace: str, labels: bytes = b"") -> bytes:
    """A pod submission without annotations (labels only when given)."""
    meta = b'"name":"' + name.encode() + b'","namespace":"' + namespace.encode() + b'"' + labels
    return (
        b'{"type":"esched.pod.submitted","id":"s-' + name.encode() + b'","source":"t",'
        b'"data":{"metadata":{' + meta + b'},"spec":' + _PLAIN_SPECS[0] + b"}}"
    )


def test_unlabeled_pods_get_their_namespaces_label_set_on_both_paths() -> None:
    # The label set of a pod without labels is remembered by namespace between pods
    # (InterPodIndex.set_pod): namespaces alternating, one a prefix of another, and
    # labelled pods between them must each still get their own.
    ev = [orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="64", memory="256Gi")))]
    order = ["ns", "ns", "ns2", "ns", "n", "ns2", "ns2", "ns"]
    for i, namespace in enumerate(order):
        ev.append(_bare_submit(f"p{i}", namespace))
        if i % 3 == 0:
            ev.append(_bare_submit(f"l{i}", namespace, b',"labels":{"app":"x"}'))
        ev.append(_bare_submit(f"e{i}", namespace, b',"labels":{}'))
    a, b = _fold_both(ev)
    _assert_same(a, b)
    for state in (a, b):
        ip = state.interpod
        for key, p in state.pod_index.items():
            namespace, name = key.split("/")
            labels = {"app": "x"} if name.startswith("l") else {}
            assert ip.lsets[ip.pod_lset_of(p)] == (namespace, labels), key


def test_tables_grown_past_their_first_size_fold_as_the_dict_path_does() -> None:
    # Beyond the initial pod and node capacity the tables are copied into larger ones
    # of which only the new part is zeroed; a resource registered in between widens
    # them (new columns zero for the rows already there).
    ev = [orjson.dumps(envelope(EV.NODE_ADDED, node(f"n{i}", cpu="64"))) for i in range(40)]
    ev += [_submit(f"a{i}", _PLAIN_SPECS[0]) for i in range(1500)]
    ev += [_commit_raw(f"a{i}", f"n{i % 40}") for i in range(0, 1500, 7)]
    gpu = node("g1", cpu="64", **{"example.com/gpu": "8"})
    ev.append(orjson.dumps(envelope(EV.NODE_ADDED, gpu)))
    ev += [_submit(f"b{i}", _PLAIN_SPECS[1]) for i in range(1500)]
    a, b = _fold_both(ev)
    _assert_same(a, b)
    assert b.n_pods == 3000
    assert b.pod_alloc_np.shape[0] >= 3000 and not b.pod_alloc_np[b.n_pods :].any()
    assert not b.allocated_np[b.n_nodes :].any()
    gpu_col = b.res_index["example.com/gpu"]
    assert not b.pod_alloc_np[:, gpu_col].any()


def _class_of_pod(state: ClusterState, key: str) -> dict:
    return state.class_specs[state.pod(key)["class"]]


@pytest.mark.parametrize("by_bytes", [False, True])
def test_profile_specs_take_the_short_class_path_with_the_general_paths_class(
    by_bytes: bool,
) -> None:
    """A spec of containers with a schedulerName, restartPolicy or priorityClassName
    (what a Volcano Job's pods carry: schemas/manifests.py volcano_task_pod) gets the
    class the general path gives the same spec with one more field that changes
    nothing (an empty nodeSelector, a dnsPolicy); the profile is part of the class
    (docs/architecture.md, profile parsing), so other schedulerNames, or none, give
    other classes."""
    containers = [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
    cases = {
        "volcano": {"schedulerName": "volcano"},
        "volcano-restart": {"schedulerName": "volcano", "restartPolicy": "OnFailure"},
        "volcano-high": {"schedulerName": "volcano", "priorityClassName": "high"},
        "other": {"schedulerName": "other"},
        "none": {},
        "none-restart": {"restartPolicy": "Never"},
        "empty": {"schedulerName": ""},
    }
    events = [envelope(EV.NODE_ADDED, node("n1", cpu="16", memory="64Gi"))]
    for name, extra in cases.items():
        short = {"containers": containers, **extra}
        for suffix, spec in (
            ("short", short),
            ("selector", {**short, "nodeSelector": {}}),
            ("dns", {**short, "dnsPolicy": "ClusterFirst"}),
        ):
            events.append(
                envelope(
                    EV.POD_SUBMITTED,
                    {"metadata": {"name": f"{name}-{suffix}", "namespace": "ns"}, "spec": spec},
                )
            )
    state = ClusterState()
    if by_bytes:
        state.apply_payloads([(i, orjson.dumps(e)) for i, e in enumerate(events, 1)])
    else:
        state.apply_many(list(enumerate(events, 1)))
    cls = {name: state.pod(f"ns/{name}-short")["class"] for name in cases}
    for name in cases:
        for suffix in ("selector", "dns"):
            assert state.pod(f"ns/{name}-{suffix}")["class"] == cls[name], (name, suffix)
    # restartPolicy is no part of the class; the profile and the PriorityClass are.
    assert cls["volcano-restart"] == cls["volcano"]
    assert cls["none-restart"] == cls["none"] == cls["empty"]
    assert len({cls["volcano"], cls["other"], cls["none"], cls["volcano-high"]}) == 4
    volcano = state.class_specs[cls["volcano"]]
    assert volcano["constraints"] == {
        "nodeSelector": None,
        "required": None,
        "tolerations": None,
        "schedulerName": "volcano",
    }
    assert state.class_specs[cls["volcano-high"]]["priorityClassName"] == "high"
    assert state.class_specs[cls["none"]]["constraints"] is None
    assert state.scheduler_of["ns/volcano-short"] == "volcano"
    assert "ns/none-short" not in state.scheduler_of and "ns/empty-short" not in state.scheduler_of


def _job_payloads(name: str, spec: dict, queue: str = "default", **job_spec) -> list[bytes]:
    """A one-task Volcano Job, its PodGroup and pods as its controller creates them."""
    from esched.schemas.manifests import volcano_job_objects

    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "queue": queue,
            "tasks": [{"name": "w", "replicas": 2, "template": {"spec": spec}}],
            **job_spec,
        },
    }
    return [orjson.dumps(envelope(t, o)) for t, o in volcano_job_objects(job)]


def test_volcano_job_pods_fold_from_their_bytes_as_the_dict_path_does() -> None:
    """A Volcano Job's pods (labels, six annotations, a schedulerName) fold on the
    bytes path to the dict path's state: in the default queue and another, in a gang
    whose PodGroup names a PriorityClass, in a queue with a node-group affinity, with
    a restartPolicy, before and after a PriorityClass is folded, a spec seen twice."""
    req = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    spec = {"containers": [{"name": "c", "resources": req}]}
    group = {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g-a"]}}
    ev = [
        orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="64", memory="256Gi"))),
        orjson.dumps(envelope(EV.QUEUE_UPSERTED, {"metadata": {"name": "q1"}})),
        orjson.dumps(
            envelope(EV.QUEUE_UPSERTED, {"metadata": {"name": "qa"}, "spec": {"affinity": group}})
        ),
    ]
    ev += _job_payloads("j0", spec)
    ev += _job_payloads("j1", spec)  # the same spec: a memo hit
    ev += _job_payloads("j2", spec, queue="q1")
    ev += _job_payloads("j3", spec, queue="qa")
    ev += _job_payloads("j4", {**spec, "restartPolicy": "OnFailure"})
    ev += _job_payloads("j5", spec, priorityClassName="system-node-critical")
    ev += _job_payloads("j6", spec, schedulerName="other")
    ev.append(_commit_raw("j0-w-0", "n1"))
    high = {"metadata": {"name": "hi"}, "value": 7, "globalDefault": True}
    ev.append(orjson.dumps(envelope(EV.PRIORITYCLASS_UPSERTED, high)))
    ev += _job_payloads("j7", spec)
    ev += _job_payloads("j8", {"containers": [{"name": "c", "resources": req}]}, queue="q1")
    assert all(_py_scanner_accepts(p) for p in ev)
    a, b = _fold_both(ev)
    _assert_same(a, b)
    assert b.scheduler_of == a.scheduler_of
    assert b.anomalies == a.anomalies
    pods = [f"ns/j{j}-w-{i}" for j in range(9) for i in range(2)]
    assert [b.pod(k)["class"] for k in pods] == [a.pod(k)["class"] for k in pods]
    assert b.scheduler_of["ns/j0-w-1"] == "volcano" and b.scheduler_of["ns/j6-w-0"] == "other"
    assert _class_of_pod(b, "ns/j0-w-1")["constraints"]["schedulerName"] == "volcano"
    assert _class_of_pod(b, "ns/j3-w-0")["constraints"]["nodeGroup"]
    assert _class_of_pod(b, "ns/j5-w-0")["priorityClassName"] == "system-node-critical"
    assert _class_of_pod(b, "ns/j7-w-0")["priority"] == 7
