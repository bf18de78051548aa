"""Names and readings of verbs completion statuses, vendor syndromes and async events.

Shared by the NCCL (:mod:`diagnose.collectors.nccl_log`) and UCX (:mod:`diagnose.collectors.ucx_log`) log collectors.
Sources: ``enum ibv_wc_status`` and ``enum ibv_event_type`` in rdma-core
``libibverbs/verbs.h`` (strings from ``ibv_wc_status_str``/``ibv_event_type_str``),
and the mlx5 CQE error syndromes of ``providers/mlx5/mlx5dv.h`` (``MLX5_CQE_SYNDROME_*``).
"""

from __future__ import annotations

#: ibv_wc_status: code -> (IBV_WC_* name, what it means to an operator).
WC_STATUS: dict[int, tuple[str, str]] = {
    0: ("IBV_WC_SUCCESS", "success"),
    1: ("IBV_WC_LOC_LEN_ERR", "local length error: a message longer than the receive buffer or the path MTU"),
    2: ("IBV_WC_LOC_QP_OP_ERR", "local QP operation error: malformed work request or QP attributes"),
    3: ("IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"),
    4: ("IBV_WC_LOC_PROT_ERR", "local protection error: the buffer is not (or no longer) registered for this PD"),
    5: ("IBV_WC_WR_FLUSH_ERR", "work request flushed: the QP was already in error (secondary to another error)"),
    6: ("IBV_WC_MW_BIND_ERR", "memory window bind error"),
    7: ("IBV_WC_BAD_RESP_ERR", "bad response from the responder"),
    8: ("IBV_WC_LOC_ACCESS_ERR", "local access error: protection error on a local data buffer"),
    9: ("IBV_WC_REM_INV_REQ_ERR", "remote invalid request: the responder rejected the request (length, opcode, MTU)"),
    10: ("IBV_WC_REM_ACCESS_ERR", "remote access error: rkey/address rejected by the responder's memory registration"),
    11: ("IBV_WC_REM_OP_ERR", "remote operation error: the responder could not complete the operation"),
    12: ("IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded: no ACK from the responder (timeout)"),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "receiver-not-ready retries exceeded: the responder posted no receive buffer"),
    14: ("IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation"),
    15: ("IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"),
    16: ("IBV_WC_REM_ABORT_ERR", "remote aborted"),
    17: ("IBV_WC_INV_EECN_ERR", "invalid EE context number"),
    18: ("IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"),
    19: ("IBV_WC_FATAL_ERR", "fatal error: the RNIC reported a catastrophic error"),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", "response timeout"),
    21: ("IBV_WC_GENERAL_ERR", "general error"),
    22: ("IBV_WC_TM_ERR", "tag matching error"),
    23: ("IBV_WC_TM_RNDV_INCOMPLETE", "tag matching rendezvous incomplete"),
}

#: mlx5 vendor error syndromes (``vendor err`` in NCCL, ``vend`` in UCX) as NVIDIA support reads them.
VENDOR_ERR: dict[int, str] = {
    0x81: "0x81: transport retries exhausted, no ACK came back (packet loss, link down or unreachable peer)",
    0xF9: "0xf9: flushed because the QP had already moved to error (secondary)",
    0x51: "0x51: local protection, seen with status 4 (memory registration or GPUDirect mapping)",
}

#: mlx5 CQE error syndrome (UCX ``synd``) -> ibv_wc_status code.
MLX5_SYNDROME: dict[int, int] = {
    0x01: 1,
    0x02: 2,
    0x04: 4,
    0x05: 5,
    0x06: 6,
    0x10: 7,
    0x11: 8,
    0x12: 9,
    0x13: 10,
    0x14: 11,
    0x15: 12,
    0x16: 13,
    0x22: 16,
}

#: Async events (``ibv_event_type_str``) -> (scope, severity). ``port``: the RNIC port went down;
#: ``qp``: one QP hit an error (configuration or a peer); ``device``: the RNIC itself failed;
#: ``info``: normal state changes.
ASYNC_EVENTS: dict[str, tuple[str, str]] = {
    "port error": ("port", "error"),
    "local catastrophic error": ("device", "critical"),
    "device fatal": ("device", "critical"),
    "local access violation work queue error": ("qp", "error"),
    "local work queue catastrophic error": ("qp", "error"),
    "invalid request local work queue error": ("qp", "error"),
    "cq error": ("qp", "error"),
    "wq fatal": ("qp", "error"),
    "srq catastrophic error": ("qp", "error"),
    "path migration request error": ("qp", "warning"),
    "port active": ("info", "info"),
    "lid change": ("info", "info"),
    "pkey change": ("info", "info"),
    "p_key change": ("info", "info"),
    "sm change": ("info", "info"),
    "client reregistration": ("info", "info"),
    "gid table change": ("info", "info"),
    "communication established": ("info", "info"),
    "send queue drained": ("info", "info"),
    "path migrated": ("info", "info"),
    "srq limit reached": ("info", "info"),
    "last wqe reached": ("info", "info"),
}

#: errno text of a failed ``ibv_*`` call -> (finding kind, what to check). NCCL prints strerror().
VERBS_CALL_ERRNO: dict[str, tuple[str, str]] = {
    "no such device": (
        "hca_selection",
        "the selected HCA/port cannot be used here (no netdev or GID behind it in this namespace/container): "
        "select the right HCA with NCCL_IB_HCA (e.g. exclude it with ^name)",
    ),
    "invalid argument": (
        "gid_index",
        "QP attributes the HCA refuses, most often a GID index pointing at an empty or wrong-type GID entry "
        "(NCCL_IB_GID_INDEX) or an unsupported MTU: compare show_gids with the index in use",
    ),
    "cannot allocate memory": (
        "rdma_resource_limit",
        "memory for QPs/MRs could not be pinned: raise the locked-memory limit (ulimit -l unlimited, "
        "container memlock) or lower the number of QPs",
    ),
    "bad address": (
        "rdma_access_error",
        "memory registration failed: for GPU buffers GPUDirect RDMA peer memory is missing (nvidia-peermem not "
        "loaded, or dma-buf unsupported by the kernel/driver); for host buffers the address is not mapped",
    ),
    "network is unreachable": (
        "gid_index",
        "no route to the peer's GID: RoCE v2 needs a routable GID on both ends (compare show_gids on both hosts)",
    ),
    "connection timed out": ("undetermined", "the peer did not answer QP setup: the path or the peer"),
    "operation not permitted": (
        "rdma_resource_limit",
        "the process may not use the device (capabilities, /dev/infiniband permissions in the container)",
    ),
}


def status_name(code: int) -> str:
    """``12`` -> ``"IBV_WC_RETRY_EXC_ERR"``; unknown codes -> ``"IBV_WC_<code>"``."""
    return WC_STATUS.get(code, (f"IBV_WC_{code}", ""))[0]


def status_meaning(code: int) -> str:
    """What a status code means, in words."""
    return WC_STATUS.get(code, ("", f"status {code} (not in ibv_wc_status)"))[1]


def vendor_meaning(vendor: int | None) -> str:
    """Reading of an mlx5 vendor syndrome, or '' when unknown or absent."""
    return VENDOR_ERR.get(vendor, f"0x{vendor:x}") if vendor is not None else ""


def is_flush(status: int | None, vendor: int | None) -> bool:
    """Status 5 (flush) or vendor 0xf9: a consequence of an earlier error on the same QP, never the cause."""
    return status == 5 or vendor == 0xF9
