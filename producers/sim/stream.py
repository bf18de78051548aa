"""The simulator as a source of encoded agent uploads (what a ``sim`` agent would publish).

Each 5 s of event time yields, per live host, one ``probe.v1`` and one ``path.v1``
Arrow IPC payload built with nanoarrow (the agent's builder, docs/design.md), ready for the
Kafka producer: probes to ``probes.raw``, paths to ``paths.traced``, both keyed by
agent id. Registry updates (a restarted host's new QPNs) come as ``registry.v1``
payloads in the batch where the new QPN takes effect.
"""

from __future__ import annotations

from collections.abc import Iterator

from producers.sim.engine import BATCH_NS, Simulator, to_pylists
from schemas.arrow_nano import encode_columns


def registry_updates(sim: Simulator, start_ns: int, end_ns: int) -> dict[str, list]:
    """``registry.v1`` columns of RNICs whose QPN changed in ``[start_ns, end_ns)`` (restarts)."""
    cols = sim.registry.to_columns("controller", end_ns)
    keep = []
    for i, r in enumerate(cols["rnic"]):
        for eff, _known, _q in sim.restarts.get(sim.rnic_id[r], []):
            if start_ns <= eff < end_ns:
                keep.append(i)
                break
    out = {k: [v[i] for i in keep] for k, v in cols.items()}
    out["qpn"] = [sim.qpn_at(r, end_ns) for r in out["rnic"]]
    out["agent_id"] = [sim.inv.host_of(r) for r in out["rnic"]]
    return out


def encoded_uploads(sim: Simulator, start_ns: int, n_batches: int | None = None) -> Iterator[tuple[str, str, bytes]]:
    """Yield ``(schema_key, agent_id, payload)`` for consecutive 5 s batches from ``start_ns``.

    Runs for ever when ``n_batches`` is None. Hosts with no probe rows still send an empty
    ``probe.v1`` batch (the agent's heartbeat, so the analyzer can tell silent from idle).
    """
    i = 0
    while n_batches is None or i < n_batches:
        t0 = start_ns + i * BATCH_NS
        reg = registry_updates(sim, t0, t0 + BATCH_NS)
        if reg["rnic"]:
            yield "registry.v1", "controller", encode_columns("registry.v1", reg)
        for agent, probes, paths in sim.upload_batches(t0):
            yield "probe.v1", agent, encode_columns("probe.v1", to_pylists(probes))
            if len(paths["hops"]):
                yield "path.v1", agent, encode_columns("path.v1", to_pylists(paths))
        i += 1
