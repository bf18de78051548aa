"""Kernel packet timestamps for UDP sockets (``SO_TIMESTAMPING``), and network namespaces.

Linux ``Documentation/networking/timestamping.rst``: a socket with
``SOF_TIMESTAMPING_RX_SOFTWARE | SOFTWARE`` gets, for every packet it receives, the
time the kernel took it from the device, and for every packet it sends with
``TX_SOFTWARE`` in an ``SO_TIMESTAMPING`` control message, a copy on its error
queue carrying the time the packet was handed to the device driver
(``SCM_TSTAMP_SND``); both are ``CLOCK_REALTIME`` nanoseconds.
With ``TX_HARDWARE | RX_HARDWARE | RAW_HARDWARE`` on a NIC whose hardware
timestamping is enabled (``SIOCSHWTSTAMP``) the third slot holds the NIC clock.
These stand in for R-Pingmesh's RNIC CQE timestamps (§4.2.1): t2, t5 on the
prober and t3, t4 on the responder.

Only the standard library is used (agents stay light, docs/design.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Iterator
from typing import NamedTuple

# <asm-generic/socket.h>, <linux/net_tstamp.h>, <linux/errqueue.h>
SO_TIMESTAMPING = 37
SCM_TIMESTAMPING = SO_TIMESTAMPING
SOF_TX_HARDWARE = 1 << 0
SOF_TX_SOFTWARE = 1 << 1
SOF_RX_HARDWARE = 1 << 2
SOF_RX_SOFTWARE = 1 << 3
SOF_SOFTWARE = 1 << 4
SOF_RAW_HARDWARE = 1 << 6
SOF_OPT_ID = 1 << 7
SOF_OPT_TSONLY = 1 << 11
SO_EE_ORIGIN_ICMP = 2
SO_EE_ORIGIN_TIMESTAMPING = 4
SCM_TSTAMP_SND = 0
SCM_TS_OPT_ID = 81  # per-send timestamp key (Linux 6.13+)
IP_RECVERR = 11
IP_TTL = 2
MSG_ERRQUEUE = 0x2000
SIOCETHTOOL = 0x8946
SIOCSHWTSTAMP = 0x89B0
ETHTOOL_GET_TS_INFO = 0x41
HWTSTAMP_TX_ON = 1
HWTSTAMP_FILTER_ALL = 1

# The socket reports RX timestamps of every datagram; a TX timestamp is asked for per send (tx_flags), so
# datagrams whose send time nobody reads (ACK2, trace packets) queue nothing on the error queue.
SOFTWARE_FLAGS = SOF_RX_SOFTWARE | SOF_SOFTWARE | SOF_OPT_ID | SOF_OPT_TSONLY
HARDWARE_FLAGS = SOF_RX_HARDWARE | SOF_RAW_HARDWARE | SOF_OPT_ID | SOF_OPT_TSONLY

_TS = struct.Struct("=qqqqqq")  # struct scm_timestamping: ts[3] of (tv_sec, tv_nsec)
_EE = struct.Struct("=IBBBBII")  # struct sock_extended_err
ANCBUF = 512


class ErrQueueEntry(NamedTuple):
    """One message read from a socket's error queue.

    Attributes:
        origin: ``SO_EE_ORIGIN_TIMESTAMPING`` (a TX timestamp) or ``SO_EE_ORIGIN_ICMP``.
        ts_ns: the timestamp (ns, kernel or NIC clock) for a TX timestamp, else None.
        key: ``SOF_TIMESTAMPING_OPT_ID`` counter of the timestamped send (0-based per socket).
        icmp_type, icmp_code: for ICMP errors (11 = time exceeded, 3 = unreachable).
        offender: IPv4 address that sent the ICMP error, "" if none.
        payload: the UDP payload of the offending datagram (ICMP errors only).
        dst_ip, dst_port: where the offending datagram was sent (ICMP errors only; "" and 0 otherwise).
    """

    origin: int
    ts_ns: int | None
    key: int
    icmp_type: int
    icmp_code: int
    offender: str
    payload: bytes
    dst_ip: str = ""
    dst_port: int = 0


def enable(sock: socket.socket, hardware: bool = False) -> None:
    """Turn on RX timestamps (software, or raw hardware) and ICMP error reporting on ``sock``.

    TX timestamps come only for the sends that ask with :func:`tx_flags` in an ``SO_TIMESTAMPING``
    control message (Linux 4.13+).
    """
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, HARDWARE_FLAGS if hardware else SOFTWARE_FLAGS)
    sock.setsockopt(socket.SOL_IP, IP_RECVERR, 1)


def tx_flags(hardware: bool) -> int:
    """The ``SOF_TIMESTAMPING_TX_*`` flag a send passes (``SO_TIMESTAMPING`` cmsg) to get its TX timestamp."""
    return SOF_TX_HARDWARE if hardware else SOF_TX_SOFTWARE


def timestamp_from_cmsgs(ancdata: list[tuple[int, int, bytes]], hardware: bool) -> int | None:
    """The ``SCM_TIMESTAMPING`` time in ns (slot 0 software, slot 2 raw hardware), or None."""
    for level, ctype, data in ancdata:
        if level == socket.SOL_SOCKET and ctype == SCM_TIMESTAMPING and len(data) >= _TS.size:
            v = _TS.unpack_from(data)
            sec, nsec = (v[4], v[5]) if hardware else (v[0], v[1])
            if sec or nsec:
                return sec * 1_000_000_000 + nsec
    return None


ERRQUEUE_FLAGS = int(MSG_ERRQUEUE | socket.MSG_DONTWAIT)  # a plain int: IntFlag's | costs a µs per call


def errqueue_entry(data: bytes, anc: list[tuple[int, int, bytes]], hardware: bool = False,
                   addr: tuple[str, int] | None = None) -> ErrQueueEntry | None:
    """The entry of one message read with ``MSG_ERRQUEUE`` (``data``, ancillary ``anc``, ``addr`` its
    ``msg_name``: where the offending datagram was sent); None if neither a TX send timestamp nor an ICMP error."""
    for level, ctype, cdata in anc:
        if level == socket.SOL_IP and ctype == IP_RECVERR and len(cdata) >= _EE.size:
            ee_errno, origin, itype, icode, _pad, info, key = _EE.unpack_from(cdata)
            if origin == SO_EE_ORIGIN_TIMESTAMPING:
                if info == SCM_TSTAMP_SND and ee_errno == errno.ENOMSG:
                    return ErrQueueEntry(origin, timestamp_from_cmsgs(anc, hardware), key, 0, 0, "", b"")
                return None
            if origin == SO_EE_ORIGIN_ICMP:
                offender = ""
                if len(cdata) >= _EE.size + 8 and struct.unpack_from("=H", cdata, _EE.size)[0] == socket.AF_INET:
                    offender = socket.inet_ntoa(cdata[_EE.size + 4 : _EE.size + 8])
                dst = addr if isinstance(addr, tuple) and len(addr) >= 2 else ("", 0)
                return ErrQueueEntry(origin, None, 0, itype, icode, offender, data, str(dst[0]), int(dst[1]))
            return None
    return None


def read_errqueue(sock: socket.socket, hardware: bool = False) -> Iterator[ErrQueueEntry]:
    """Drain ``sock``'s error queue: TX timestamps and ICMP errors, oldest first."""
    while True:
        try:
            data, anc, _flags, addr = sock.recvmsg(256, ANCBUF, ERRQUEUE_FLAGS)
        except (BlockingIOError, InterruptedError):
            return
        e = errqueue_entry(data, anc, hardware, addr)
        if e is not None:
            yield e


def _ifreq(ifname: str, data: bytearray) -> bytes:
    """A ``struct ifreq`` (40 bytes) naming ``ifname`` with ``ifr_data`` pointing at ``data``."""
    ptr = ctypes.addressof(ctypes.c_char.from_buffer(data))
    return struct.pack("@16sP16x", ifname.encode()[:15], ptr)


def ts_capabilities(ifname: str) -> int:
    """``SOF_TIMESTAMPING_*`` capability bits of ``ifname`` (``ETHTOOL_GET_TS_INFO``); 0 if unknown."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        info = bytearray(struct.pack("=II", ETHTOOL_GET_TS_INFO, 0) + bytes(40))
        try:
            fcntl.ioctl(s.fileno(), SIOCETHTOOL, _ifreq(ifname, info))
        except OSError:
            return 0
        return struct.unpack_from("=I", info, 4)[0]
    finally:
        s.close()


def hardware_timestamping(ifname: str) -> bool:
    """Whether ``ifname`` can do raw hardware TX/RX timestamps, and enable them on the device.

    Asks ``ETHTOOL_GET_TS_INFO`` for the capabilities, then ``SIOCSHWTSTAMP`` with
    TX on and RX filter ALL. Returns False (software timestamps) for veth and any
    NIC that refuses; needs CAP_NET_ADMIN to enable.
    """
    need = SOF_TX_HARDWARE | SOF_RX_HARDWARE | SOF_RAW_HARDWARE
    if ts_capabilities(ifname) & need != need:
        return False
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        cfg = bytearray(struct.pack("=iii", 0, HWTSTAMP_TX_ON, HWTSTAMP_FILTER_ALL))
        fcntl.ioctl(s.fileno(), SIOCSHWTSTAMP, _ifreq(ifname, cfg))
        return True
    except OSError:
        return False
    finally:
        s.close()


_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block in network namespace ``name`` (``/run/netns/<name>``), then come back.

    Sockets created inside stay in that namespace for their whole life, so an
    agent can open its probe sockets in a host namespace and keep its Kafka
    connection in the root one. ``None`` does nothing. Needs CAP_SYS_ADMIN.
    """
    if not name:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)
