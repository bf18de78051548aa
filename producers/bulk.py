"""Vectorised bulk probe batches for benchmarks and scale tests (numpy columns, no per-row Python).

Not an agent path: agents build with nanoarrow. These columns feed
``schemas.arrow_pa.table_from_columns("probe.v1", cols)``.
"""

from __future__ import annotations

import numpy as np

from schemas.records import PROBE_V1


def bulk_probe_columns(
    n_rows: int,
    seed: int,
    start_ns: int,
    agent_id: str = "h0",
    seq0: int = 0,
    n_rnics: int = 64,
    timeout_rate: float = 0.001,
) -> dict[str, object]:
    """``n_rows`` probe.v1 rows spread over 5 s from ``start_ns`` with realistic ns readings.

    Network RTT ~ U(5, 15) µs, responder delay ~ U(1, 4) µs, prober delay ~ U(2, 8) µs;
    timeouts (rate ``timeout_rate``) keep t1, t2 and null the rest.
    """
    rng = np.random.default_rng(seed)
    t1 = start_ns + np.sort(rng.integers(0, 5_000_000_000, n_rows))
    net = rng.integers(5_000, 15_000, n_rows)
    resp = rng.integers(1_000, 4_000, n_rows)
    prober = rng.integers(2_000, 8_000, n_rows)
    t2 = t1 + 1_000_000 + prober // 2
    t3 = t2 + 3_000_000_000 + net // 2
    t4 = t3 + resp
    t5 = t2 + net + resp
    t6 = t5 - 1_000_000 + (prober - prober // 2)
    timeout = rng.random(n_rows) < timeout_rate
    src = rng.integers(0, n_rnics, n_rows)
    dst = (src + 1 + rng.integers(0, n_rnics - 1, n_rows)) % n_rnics
    rnic_names = np.array([f"r{i}" for i in range(n_rnics)], dtype=object)
    host_names = np.array([f"h{i // 8}" for i in range(n_rnics)], dtype=object)

    def masked(a: np.ndarray) -> np.ndarray:
        out = a.astype(object)
        out[timeout] = None
        return out

    cols: dict[str, object] = {
        "agent_id": np.full(n_rows, agent_id, dtype=object),
        "upload_ns": np.full(n_rows, start_ns + 5_000_000_000, dtype=np.int64),
        "seq": np.arange(seq0, seq0 + n_rows, dtype=np.uint64),
        "pinglist": np.where(rng.random(n_rows) < 0.7, "tor_mesh", "inter_tor").astype(object),
        "prober_host": host_names[src],
        "prober_rnic": rnic_names[src],
        "responder_host": host_names[dst],
        "responder_rnic": rnic_names[dst],
        "src_ip": np.full(n_rows, "10.0.0.1", dtype=object),
        "dst_ip": np.full(n_rows, "10.0.0.2", dtype=object),
        "src_port": rng.integers(49152, 65535, n_rows).astype(np.uint16),
        "dst_port": np.full(n_rows, 4791, dtype=np.uint16),
        "flow_label": rng.integers(0, 1 << 20, n_rows).astype(np.uint32),
        "traffic_class": np.full(n_rows, 26, dtype=np.uint8),
        "priority": np.full(n_rows, 3, dtype=np.uint8),
        "qpn": np.full(n_rows, 1000, dtype=np.uint32),
        "gid_index": np.full(n_rows, 3, dtype=np.uint16),
        "job_id": np.full(n_rows, None, dtype=object),
        "t1": t1,
        "t2": t2,
        "t3": masked(t3),
        "t4": masked(t4),
        "t5": masked(t5),
        "t6": masked(t6),
        "ts_source": np.full(n_rows, "hardware", dtype=object),
        "status": np.where(timeout, "timeout", "ok").astype(object),
    }
    assert list(cols) == PROBE_V1.names
    return cols
