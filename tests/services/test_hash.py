"""murmur2 in C against aiokafka's pure-Python one and the Java client's vectors."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as py_murmur2

from esched.services.bus._hash import murmur2, partition


def test_murmur2_matches_the_java_clients_published_values() -> None:
    # From kafka clients' UtilsTest.testMurmur2 (signed ints there).
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, signed in cases.items():
        assert murmur2(key) == signed & 0xFFFFFFFF, key


def test_murmur2_and_partitions_match_aiokafka_for_every_key_length() -> None:
    rng = random.Random(5)
    default = DefaultPartitioner()
    parts = list(range(8))
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in range(64) for _ in range(20)]
    keys += [f"ns-{i}/pod-{i}".encode() for i in range(500)]
    for key in keys:
        assert murmur2(key) == py_murmur2(key), key
        assert partition(key, parts, parts) == default(key, parts, parts), key
    assert partition(None, parts, [3]) == 3  # unkeyed: an available partition
