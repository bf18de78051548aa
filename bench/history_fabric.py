"""A simulated month of probe history and verdicts for a small fabric, built with numpy
into ``probes`` and its tiers (:func:`bench.probe_insert.insert_probes`, the tiers as in production),
plus independent numpy/Python computations of what every saved query must answer.

Fabric: ``tors`` ToRs, ``rnics_per_tor`` RNICs each, 2 RNICs per host. Every hour each
RNIC sends ``per_hour`` probes: 60 % ToR-mesh (peers under its ToR), 30 % inter-ToR
(random RNICs elsewhere), 10 % service. RTTs are log-normal per pinglist with a
1 % tail; one ToR pair ("T01" -> "T03") loses 5 % of its probes, the rest 0.1 %.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

HOUR_NS = 3600 * 10**9
PINGLIST_NAMES = np.array(["tor_mesh", "inter_tor", "service"])


@dataclass
class Fabric:
    """RNIC ids, their hosts and ToRs (index-aligned)."""

    rnics: list[str]
    hosts: list[str]
    tors: list[str]

    @property
    def inventory(self) -> list[tuple[str, str, str]]:
        return list(zip(self.rnics, self.hosts, self.tors, strict=True))


def fabric(tors: int = 10, rnics_per_tor: int = 10) -> Fabric:
    """``tors`` x ``rnics_per_tor`` RNICs named ``R0007``, hosts ``H0003``, ToRs ``T00``."""
    n = tors * rnics_per_tor
    return Fabric([f"R{i:04d}" for i in range(n)], [f"H{i // 2:04d}" for i in range(n)],
                  [f"T{i // rnics_per_tor:02d}" for i in range(n)])


@dataclass
class ProbeArrays:
    """One row per probe, as numpy arrays (indices into the fabric and PINGLIST_NAMES)."""

    t1: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    pinglist: np.ndarray
    timeout: np.ndarray
    rtt: np.ndarray
    responder: np.ndarray
    prober: np.ndarray


def simulate(fab: Fabric, start_ns: int, hours: int, per_hour: int = 20, seed: int = 7,
             period_ns: int = HOUR_NS) -> ProbeArrays:
    """Probes of ``hours`` periods (an hour unless ``period_ns`` says otherwise) from ``start_ns``,
    ``per_hour`` probes per RNIC per period (see the module docstring for the model)."""
    rng = np.random.default_rng(seed)
    n_rnic = len(fab.rnics)
    tor_idx = np.array([int(t[1:]) for t in fab.tors])
    per_tor = int(np.sum(tor_idx == 0))
    rows = n_rnic * per_hour * hours
    src = np.tile(np.repeat(np.arange(n_rnic), per_hour), hours)
    hour = np.repeat(np.arange(hours), n_rnic * per_hour)
    t1 = start_ns + hour.astype(np.int64) * period_ns + rng.integers(0, period_ns, rows)
    kind = rng.choice(3, rows, p=[0.6, 0.3, 0.1])
    # ToR-mesh: another RNIC under the same ToR; others: an RNIC under another ToR.
    same = tor_idx[src] * per_tor + (src % per_tor + rng.integers(1, per_tor, rows)) % per_tor
    n_tor = n_rnic // per_tor
    other_tor = (tor_idx[src] + rng.integers(1, n_tor, rows)) % n_tor
    other = other_tor * per_tor + rng.integers(0, per_tor, rows)
    dst = np.where(kind == 0, same, other)
    base = np.array([6_000.0, 14_000.0, 15_000.0])[kind]
    rtt = rng.lognormal(np.log(base), 0.25)
    tail = rng.random(rows) < 0.01
    rtt = np.where(tail, rtt * rng.uniform(3, 20, rows), rtt).astype(np.int64)
    bad_pair = (tor_idx[src] == 1) & (tor_idx[dst] == 3)
    timeout = rng.random(rows) < np.where(bad_pair, 0.05, 0.001)
    responder = rng.lognormal(np.log(2_000), 0.3, rows).astype(np.int64)
    prober = rng.lognormal(np.log(4_000), 0.4, rows).astype(np.int64)
    return ProbeArrays(t1, src, dst, kind, timeout, rtt, responder, prober)


def probe_table(fab: Fabric, p: ProbeArrays, sl: slice, batch_id: str) -> pa.Table:
    """Rows ``sl`` as a table of the ``probes`` columns the history needs (others take defaults)."""
    rnics = np.array(fab.rnics)
    hosts = np.array(fab.hosts)
    src, dst, to = p.src[sl], p.dst[sl], p.timeout[sl]
    n = len(src)

    def maybe(values: np.ndarray) -> pa.Array:
        return pa.array(values, pa.int64(), mask=to)

    return pa.table(
        {
            "agent_id": pa.array(hosts[src]),
            "upload_ns": pa.array(p.t1[sl], pa.int64()),
            "seq": pa.array(np.arange(n, dtype=np.uint64)),
            "pinglist": pa.array(PINGLIST_NAMES[p.pinglist[sl]]),
            "prober_host": pa.array(hosts[src]),
            "prober_rnic": pa.array(rnics[src]),
            "responder_host": pa.array(hosts[dst]),
            "responder_rnic": pa.array(rnics[dst]),
            "job_id": pa.array(np.where(p.pinglist[sl] == 2, np.char.add("job-", (src % 4).astype(str)), None)),
            "t1": pa.array(p.t1[sl], pa.int64()),
            "ts_source": pa.array(["hardware"] * n),
            "status": pa.array(np.where(to, "timeout", "ok")),
            "network_rtt_ns": maybe(p.rtt[sl]),
            "responder_delay_ns": maybe(p.responder[sl]),
            "prober_delay_ns": maybe(p.prober[sl]),
            "batch_id": pa.array([batch_id] * n),
        }
    )


def bucket_value(values: np.ndarray) -> np.ndarray:
    """The histogram's reading of each value: bucket floor(16 log2 v), shown as 2^((b+0.5)/16), rounded."""
    b = np.floor(16 * np.log2(np.maximum(values, 1))).astype(np.int64)
    return np.round(np.exp2((b + 0.5) / 16))


def grouped_quantiles(keys: np.ndarray, values: np.ndarray, qs: tuple[float, ...]) -> dict[int, list[float]]:
    """Per integer group key: the histogram quantiles of ``values``, computed by sorting
    (the smallest bucket whose cumulative count reaches q * n)."""
    b = np.floor(16 * np.log2(np.maximum(values, 1))).astype(np.int64)
    order = np.lexsort((b, keys))
    ks, bs = keys[order], b[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    counts = np.diff(np.r_[starts, len(ks)])
    out: dict[int, list[float]] = {}
    cols = []
    for q in qs:
        rank = np.ceil(q * counts.astype(np.float64)).astype(np.int64)  # 1-based, as c >= q * n
        cols.append(np.round(np.exp2((bs[starts + np.maximum(rank, 1) - 1] + 0.5) / 16)))
    for i, s in enumerate(starts):
        out[int(ks[s])] = [float(c[i]) for c in cols]
    return out
