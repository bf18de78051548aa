"""Wire format of the ``udp`` backend: R-Pingmesh's probe, ACK1 and ACK2 (§4.2.1) as UDP.

ACK2 carries t3 and t4 themselves (the paper's ACK2 carries t4 - t3): the
prober needs only the difference, and the rows keep both readings of the
responder's clock.

Every packet is 50 bytes of payload, the paper's probe size (§4):

====== ====== =================================================================
offset bytes  field
====== ====== =================================================================
0      2      magic ``b"FS"``
2      1      version (1)
3      1      kind: 1 probe, 2 ACK1, 3 ACK2, 4 trace, 5 trace reply
4      8      sequence number (the prober's, echoed in every reply)
12     4      QPN: in a probe the responder QPN it is addressed to; in ACK1/ACK2
              the responder's current QPN (a restarted responder has a new one);
              0 in a trace reply (a trace does not know the QPN, so learns none)
16     4      the prober's own QPN (echoed)
20     8      ACK2: t3, the responder's receive time of the probe (ns); else 0
28     8      ACK2: t4, the responder's send time of ACK1 (ns); else 0
36     1      ACK2: 1 when t3/t4 are hardware (NIC) timestamps, 0 software
37     13     zero padding
====== ====== =================================================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PAYLOAD_BYTES = 50
MAGIC = b"FS"
VERSION = 1
PROBE, ACK1, ACK2, TRACE, TRACE_REPLY = 1, 2, 3, 4, 5
_HEAD = struct.Struct("!2sBBQIIqqB")
_PAD = bytes(PAYLOAD_BYTES - _HEAD.size)


@dataclass(frozen=True)
class Packet:
    """One decoded payload; see the module table for the fields."""

    kind: int
    seq: int
    qpn: int
    prober_qpn: int = 0
    t3: int = 0
    t4: int = 0
    hardware: bool = False

    def encode(self) -> bytes:
        """The 50-byte payload."""
        return encode(self.kind, self.seq, self.qpn, self.prober_qpn, self.t3, self.t4, self.hardware)


def encode(kind: int, seq: int, qpn: int, prober_qpn: int = 0, t3: int = 0, t4: int = 0, hardware: bool = False
           ) -> bytes:
    """The 50-byte payload of these fields (what :meth:`Packet.encode` gives, without building a Packet)."""
    return _HEAD.pack(MAGIC, VERSION, kind, seq, qpn, prober_qpn, t3, t4, hardware) + _PAD


def fields(data: bytes) -> tuple[int, int, int, int, int, int, int] | None:
    """``(kind, seq, qpn, prober_qpn, t3, t4, hardware)`` of a payload, or None when it is not ours.

    The engine's per-packet path: :func:`decode` without the Packet object.
    """
    if len(data) < _HEAD.size:
        return None
    magic, version, kind, seq, qpn, pqpn, t3, t4, hw = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION or not PROBE <= kind <= TRACE_REPLY:
        return None
    return kind, seq, qpn, pqpn, t3, t4, hw


def decode(data: bytes) -> Packet | None:
    """Parse a payload; None for anything that is not ours (wrong size, magic or version)."""
    f = fields(data)
    if f is None:
        return None
    kind, seq, qpn, pqpn, t3, t4, hw = f
    return Packet(kind, seq, qpn, pqpn, t3, t4, bool(hw))
