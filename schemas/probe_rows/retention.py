"""Which raw probe rows the store keeps: the retention policy (the tiers always count every probe).

``full`` (the default) keeps every row. ``anomalies`` keeps what an operator digs into
after the fact, and a uniform sample of the rest for baselines and spot checks:

- every timeout;
- every ``service`` probe (the job's own 5-tuples, what `blame` reads);
- every probe whose network RTT is over its flow's baseline: the per-flow P99
  baseline the latency rule keeps (:func:`streams.pingmesh.latency.update_baseline`,
  flow = pinglist, prober RNIC, responder RNIC, source port), published by the
  reducer after each window;
- a seeded uniform sample of the rest (default 1 %). The draw is a hash of
  ``(agent_id, seq, seed)``, not a random stream, so a replayed message keeps the
  same rows.

At the paper's rates most probes are healthy ToR-mesh and inter-ToR probes; under
``anomalies`` the store keeps a few percent of them (BENCHMARKS.md gives bytes per
day for 10,000 RNICs under each policy).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POLICIES = ("full", "anomalies")


@dataclass(frozen=True)
class RetentionPolicy:
    """``mode`` full | anomalies; ``sample``: fraction of the other rows kept (0..1); ``seed`` of the draw.

    Raises:
        ValueError: an unknown mode or a sample outside 0..1 (the message names it).
    """

    mode: str = "full"
    sample: float = 0.01
    seed: int = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RetentionPolicy:
        """The policy of ``FABRICSCOPE_RAW_RETENTION`` (full | anomalies, default full), ``FABRICSCOPE_RAW_SAMPLE``
        (default 0.01) and ``FABRICSCOPE_RAW_SAMPLE_SEED`` (default 0): the store writer applies it, the
        reducer publishes baselines for it.

        Raises:
            ValueError: a variable that is not a number, or a policy the class refuses (the message names it).
        """
        def number(name: str, default: str) -> float:
            raw = environ.get(name, default)
            try:
                return float(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None

        return cls(environ.get("FABRICSCOPE_RAW_RETENTION", "full"), number("FABRICSCOPE_RAW_SAMPLE", "0.01"),
                   int(number("FABRICSCOPE_RAW_SAMPLE_SEED", "0")))

    def __post_init__(self) -> None:
        if self.mode not in POLICIES:
            raise ValueError(f"raw retention policy {self.mode!r} is not one of {', '.join(POLICIES)}")
        if not 0.0 <= self.sample <= 1.0:
            raise ValueError(f"raw retention sample {self.sample} is not a fraction between 0 and 1")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a uniform 64-bit hash of uint64 values."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def sampled(agent_id: pa.ChunkedArray | pa.Array, seq: pa.ChunkedArray | pa.Array, fraction: float,
            seed: int) -> np.ndarray:
    """Bool mask: the rows a uniform ``fraction`` sample keeps, a pure function of (agent_id, seq, seed)."""
    if isinstance(agent_id, pa.ChunkedArray):
        agent_id = agent_id.combine_chunks()
    d = agent_id.dictionary_encode()
    agent_hash = np.array([zlib.crc32(a.encode()) for a in d.dictionary.to_pylist()], dtype=np.uint64)
    codes = d.indices.to_numpy(zero_copy_only=False)
    s = np.asarray(pc.cast(seq, pa.uint64()).to_numpy(zero_copy_only=False), dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(s ^ _mix(agent_hash[codes] + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


def over_baseline(enriched: pa.Table, baseline: pa.Table | None) -> np.ndarray:
    """Bool mask: network RTT over the flow's baseline P99 (``baseline``: ``flow``, ``baseline_ns``)."""
    n = enriched.num_rows
    if baseline is None or baseline.num_rows == 0 or n == 0:
        return np.zeros(n, dtype=bool)
    parts = [pc.cast(enriched[c], pa.string()) for c in ("pinglist", "prober_rnic", "responder_rnic", "src_port")]
    flow = pc.binary_join_element_wise(*parts, "|")  # the latency rule's flow key (latency._flow_key)
    idx = pc.index_in(flow, value_set=baseline["flow"].combine_chunks())
    base = pc.take(baseline["baseline_ns"].combine_chunks(), idx)
    over = pc.greater(pc.cast(enriched["network_rtt_ns"], pa.float64()), base)
    return np.asarray(pc.fill_null(over, False).to_numpy(zero_copy_only=False), dtype=bool)


def retained(enriched: pa.Table, policy: RetentionPolicy, baseline: pa.Table | None = None) -> pa.Table:
    """The rows of ``enriched`` the store keeps under ``policy`` (row order kept)."""
    if policy.mode == "full" or enriched.num_rows == 0:
        return enriched
    keep = (np.asarray(pc.equal(enriched["status"], "timeout").to_numpy(zero_copy_only=False), dtype=bool)
            | np.asarray(pc.equal(enriched["pinglist"], "service").to_numpy(zero_copy_only=False), dtype=bool)
            | over_baseline(enriched, baseline)
            | sampled(enriched["agent_id"], enriched["seq"], policy.sample, policy.seed))
    return enriched.filter(pa.array(keep))
