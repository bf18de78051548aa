"""RTT decomposition of probe batches (R-Pingmesh §4.2.1).

Each difference is taken between two readings of one clock:

* network RTT      = (t5 − t2) − (t4 − t3)   prober RNIC clock minus responder RNIC clock spans
* responder delay  =  t4 − t3                responder RNIC clock
* prober delay     = (t6 − t1) − (t5 − t2)   prober host clock minus prober RNIC clock spans

All values are integer nanoseconds; timeouts (or any missing reading) give nulls.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from schemas.arrow_pa import arrow_schema

ENRICHED = "probe_enriched.v1"


def decompose(probes: pa.Table, batch_id: str | pa.Array) -> pa.Table:
    """Add ``network_rtt_ns``, ``responder_delay_ns``, ``prober_delay_ns`` and ``batch_id``.

    Args:
        probes: a ``probe.v1`` table (n rows); t1..t6 int64 ns, nullable.
        batch_id: identity of the source batch (``topic/partition/offset``), the
            dedup key of the store; or one per row (a string array of n values: rows of many
            source batches decomposed in one pass).

    Returns:
        A ``probe_enriched.v1`` table of n rows. Rows with status ``timeout`` or a
        missing reading have null decomposition columns.
    """
    ok = pc.equal(probes["status"], "ok")
    prober_span = pc.subtract(probes["t5"], probes["t2"])
    responder = pc.subtract(probes["t4"], probes["t3"])
    host_span = pc.subtract(probes["t6"], probes["t1"])
    null = pa.scalar(None, pa.int64())
    network = pc.if_else(ok, pc.subtract(prober_span, responder), null)
    responder = pc.if_else(ok, responder, null)
    prober = pc.if_else(ok, pc.subtract(host_span, prober_span), null)
    out = (
        probes.append_column("network_rtt_ns", network)
        .append_column("responder_delay_ns", responder)
        .append_column("prober_delay_ns", prober)
        .append_column("batch_id", pa.array([batch_id] * probes.num_rows, pa.string())
                       if isinstance(batch_id, str) else batch_id)
    )
    return pa.Table.from_arrays(out.columns, schema=arrow_schema(ENRICHED))
