"""Kafka's default partitioner hash in C: murmur2 exactly as the Java client.

aiokafka's ``DefaultPartitioner`` runs a pure-Python murmur2 for every keyed
record, several microseconds per record; the dispatcher, the replicas and the
commit service key every record they send (by gang or pod), so it showed in
their profiles. Same function, same partitions as the Java client and aiokafka:
records keep their partition whichever producer sends them.
"""

from libc.stdint cimport uint32_t


def murmur2(const unsigned char[::1] data) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2(data)`` as an unsigned 32-bit int
    (aiokafka's ``murmur2``; the partition is ``(h & 0x7fffffff) % partitions``)."""
    cdef Py_ssize_t length = data.shape[0], i, i4, base
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = (<uint32_t>0x9747B28C) ^ <uint32_t>length
    cdef uint32_t k
    with nogil:
        for i in range(length // 4):
            i4 = i * 4
            k = (<uint32_t>data[i4] | (<uint32_t>data[i4 + 1] << 8)
                 | (<uint32_t>data[i4 + 2] << 16) | (<uint32_t>data[i4 + 3] << 24))
            k *= m
            k ^= k >> 24
            k *= m
            h *= m
            h ^= k
        base = length & ~(<Py_ssize_t>3)
        if length % 4 >= 3:
            h ^= <uint32_t>data[base + 2] << 16
        if length % 4 >= 2:
            h ^= <uint32_t>data[base + 1] << 8
        if length % 4 >= 1:
            h ^= <uint32_t>data[base]
            h *= m
        h ^= h >> 13
        h *= m
        h ^= h >> 15
    return h


def partition(key, all_partitions, available) -> int:
    """aiokafka's ``DefaultPartitioner`` with :func:`murmur2` in C (its ``partitioner``
    argument): a keyed record goes to ``(murmur2(key) & 0x7fffffff) % len(all)``."""
    if key is None:
        import random

        return random.choice(available or all_partitions)
    return all_partitions[(murmur2(key) & 0x7FFFFFFF) % len(all_partitions)]
