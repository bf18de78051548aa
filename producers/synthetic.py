"""A minimal seeded synthetic prober: enough to run the pipeline end to end.

It builds ``probe.v1`` batches for a small ToR-mesh of RNICs with a fixed base
network RTT, responder and prober delays, and an optional timeout rate. It is
the pipeline's first source; the real backends live in ``producers.sim``
(fabric model with faults), ``producers.udp_*`` (netns lab) and the verbs prober.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from schemas.arrow_nano import encode_columns
from schemas.records import PROBE_V1

PROBE = "probe.v1"


def synthetic_batch(
    agent_id: str,
    rnics: list[str],
    peers: list[str],
    start_ns: int,
    n_probes: int,
    seed: int,
    seq0: int = 0,
    timeout_rate: float = 0.0,
    net_rtt_ns: int = 8_000,
    responder_delay_ns: int = 3_000,
    prober_delay_ns: int = 5_000,
) -> dict[str, list]:
    """Columns of one ``probe.v1`` batch (plain lists, no pyarrow).

    Each probe i is sent at ``start_ns + i * 5 s / n_probes`` (t1); the RNIC
    clocks are offset from the host clock to show that only same-clock
    differences are taken. Jitter is uniform ±10 %.
    """
    rng = random.Random(seed)
    host = agent_id
    cols: dict[str, list] = {f.name: [] for f in PROBE_V1.fields}
    step = 5_000_000_000 // max(n_probes, 1)
    for i in range(n_probes):
        src = rnics[i % len(rnics)]
        dst = peers[rng.randrange(len(peers))]
        t1 = start_ns + i * step
        jitter = lambda v: int(v * rng.uniform(0.9, 1.1))  # noqa: E731
        prober_clock = 1_000_000_000  # prober RNIC clock offset from its host clock
        responder_clock = 7_000_000_000
        pd = jitter(prober_delay_ns)
        t2 = t1 + prober_clock + pd // 2
        timeout = rng.random() < timeout_rate
        net = jitter(net_rtt_ns)
        resp = jitter(responder_delay_ns)
        t3 = t2 - prober_clock + responder_clock + net // 2
        t4 = t3 + resp
        t5 = t2 + net + resp
        t6 = t5 - prober_clock + (pd - pd // 2)
        row = {
            "agent_id": agent_id,
            "upload_ns": start_ns + 5_000_000_000,
            "seq": seq0 + i,
            "pinglist": "tor_mesh",
            "prober_host": host,
            "prober_rnic": src,
            "responder_host": dst.split("-")[0],
            "responder_rnic": dst,
            "src_ip": "10.0.0.1",
            "dst_ip": "10.0.0.2",
            "src_port": 49152 + (i % 64),
            "dst_port": 4791,
            "flow_label": i % 64,
            "traffic_class": 26,
            "priority": 3,
            "qpn": 1000,
            "gid_index": 3,
            "job_id": None,
            "t1": t1,
            "t2": t2,
            "t3": None if timeout else t3,
            "t4": None if timeout else t4,
            "t5": None if timeout else t5,
            "t6": None if timeout else t6,
            "ts_source": "hardware",
            "status": "timeout" if timeout else "ok",
        }
        for k, v in row.items():
            cols[k].append(v)
    return cols


def rnic_names(hosts: int, rnics_per_host: int) -> dict[str, list[str]]:
    """host -> its RNICs: ``h0 -> [h0-r0, h0-r1]``, the names the synthetic batches carry."""
    return {f"h{h}": [f"h{h}-r{r}" for r in range(rnics_per_host)] for h in range(hosts)}


def synthetic_registry(hosts: int, rnics_per_host: int, now_ns: int) -> dict[str, list]:
    """``registry.v1`` columns for every synthetic RNIC (one ToR, ``tor0``; QPN 1000 as the probes carry).

    A source registers its RNICs before it probes: the worker dead-letters rows naming RNICs the
    registry has never listed, and the topic may hold another source's registry (a lab run).
    """
    names = rnic_names(hosts, rnics_per_host)
    rows = [(h, r, i) for h, rs in names.items() for i, r in enumerate(rs)]
    return {
        "agent_id": [h for h, _, _ in rows],
        "upload_ns": [now_ns] * len(rows),
        "host": [h for h, _, _ in rows],
        "rnic": [r for _, r, _ in rows],
        "tor": ["tor0"] * len(rows),
        "ip": [f"10.0.{int(h[1:])}.{i + 1}" for h, _, i in rows],
        "gid": [f"::ffff:10.0.{int(h[1:])}.{i + 1}" for h, _, i in rows],
        "gid_index": [3] * len(rows),
        "qpn": [1000] * len(rows),
    }


def synthetic_stream(
    hosts: int, rnics_per_host: int, start_ns: int, seed: int, probes_per_batch: int = 100
) -> Iterator[tuple[str, bytes]]:
    """Endless ``(agent_id, payload)`` uploads, one per host per 5 s of event time."""
    names = rnic_names(hosts, rnics_per_host)
    every = [r for rs in names.values() for r in rs]
    k = 0
    while True:
        t = start_ns + k * 5_000_000_000
        for hi, (h, rnics) in enumerate(names.items()):
            peers = [r for r in every if r not in rnics]
            cols = synthetic_batch(
                h, rnics, peers, t, probes_per_batch, seed=seed * 1_000_003 + hi * 1009 + k, seq0=k * probes_per_batch
            )
            yield h, encode_columns(PROBE, cols)
        k += 1
