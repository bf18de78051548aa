"""Seeded hashes of the simulator: ECMP 5-tuple keys and stable per-name seeds.

Every random choice in :mod:`producers.sim` derives from these, so one seed reproduces a
whole run (the same paths, phases, clocks and losses) on any machine.
"""

from __future__ import annotations

import zlib

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic); returns a new array."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def tuple_key(src_ip: np.ndarray, dst_ip: np.ndarray, sport: np.ndarray, dport: np.ndarray) -> np.ndarray:
    """A 64-bit hash key of UDP 5-tuples (IPv4 addresses as uint32, protocol 17)."""
    a = (src_ip.astype(np.uint64) << np.uint64(32)) | dst_ip.astype(np.uint64)
    b = (sport.astype(np.uint64) << np.uint64(16)) | dport.astype(np.uint64) | np.uint64(17 << 40)
    return mix64(mix64(a) ^ b)


def stable_seed(*parts: object) -> int:
    """A 32-bit seed from ``parts`` joined by ``/`` (CRC-32: stable across runs and Python versions)."""
    return zlib.crc32("/".join(map(str, parts)).encode())
