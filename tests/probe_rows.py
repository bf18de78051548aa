"""Hand-built probe.v1 rows with hand-computed decompositions, shared by tests."""

from __future__ import annotations

import time

DAY_NS = 86_400 * 10**9


def recent(ns: int) -> int:
    """``ns`` moved by whole days to one to two days before now (epoch ns).

    Fixed event times of the tests stay inside the store's 14-day probe TTL whatever the date, and keep
    their time of day (the pinglists' hourly rotation phase, 20 s window alignment). Constant within a run."""
    return ns + ((time.time_ns() - ns) // DAY_NS - 1) * DAY_NS


BASE_NS = recent(1_795_000_000_000_000_000)  # prober host clock (epoch ns)
PROBER_RNIC0 = 2_000_000_000_000  # prober RNIC device clock, unrelated to the host clock
RESPONDER_RNIC0 = 9_000_000_000_000


def probe_row(seq: int, *, t1: int, t2: int | None, t3: int | None, t4: int | None, t5: int | None,
              t6: int | None, status: str = "ok", agent: str = "H1", src: str = "A1", dst: str = "A2") -> dict:
    """One probe.v1 row with the given readings and fixed identity fields."""
    return {
        "agent_id": agent, "upload_ns": BASE_NS + 5_000_000_000, "seq": seq, "pinglist": "tor_mesh",
        "prober_host": agent, "prober_rnic": src, "responder_host": "H2", "responder_rnic": dst,
        "src_ip": "10.1.0.1", "dst_ip": "10.1.0.2", "src_port": 49152 + seq, "dst_port": 4791,
        "flow_label": seq, "traffic_class": 26, "priority": 3, "qpn": 77, "gid_index": 3, "job_id": None,
        "t1": t1, "t2": t2, "t3": t3, "t4": t4, "t5": t5, "t6": t6, "ts_source": "hardware", "status": status,
    }


def known_rows() -> tuple[list[dict], dict[int, tuple[int | None, int | None, int | None]]]:
    """Rows and their expected (network RTT, responder delay, prober delay) in ns, by seq.

    seq 0: t5-t2 = 12 000, t4-t3 = 2 000, t6-t1 = 15 000 -> network 10 000, responder 2 000, prober 3 000
    seq 1: t5-t2 = 30 500, t4-t3 = 25 000, t6-t1 = 31 000 -> network 5 500, responder 25 000, prober 500
    seq 2: timeout (t3..t6 missing) -> all null
    """
    rows = [
        probe_row(0, t1=BASE_NS, t2=PROBER_RNIC0 + 1_000, t3=RESPONDER_RNIC0 + 4_000, t4=RESPONDER_RNIC0 + 6_000,
                  t5=PROBER_RNIC0 + 13_000, t6=BASE_NS + 15_000),
        probe_row(1, t1=BASE_NS + 100_000_000, t2=PROBER_RNIC0 + 100_000_200, t3=RESPONDER_RNIC0 + 100_003_000,
                  t4=RESPONDER_RNIC0 + 100_028_000, t5=PROBER_RNIC0 + 100_030_700, t6=BASE_NS + 100_031_000),
        probe_row(2, t1=BASE_NS + 200_000_000, t2=PROBER_RNIC0 + 200_000_300, t3=None, t4=None, t5=None, t6=None,
                  status="timeout"),
    ]
    return rows, {0: (10_000, 2_000, 3_000), 1: (5_500, 25_000, 500), 2: (None, None, None)}


def columns(rows: list[dict]) -> dict[str, list]:
    """Row dicts to a column dict."""
    return {k: [r[k] for r in rows] for k in rows[0]}
