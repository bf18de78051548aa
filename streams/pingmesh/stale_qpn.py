"""Triage step 2, stale QPN: the probe carried a QPN the registry no longer lists for the target
(it restarted): probe noise, taken out of the later steps (R-Pingmesh §5; digest Figure 3)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from schemas.group_codes import Key, key
from streams.pingmesh.context import WindowContext, log_poisson_tail, lookup_per_code, significance, sums_by


def stale_mask(t: pa.Table, registry: Mapping[str, int], responder: Key | None = None) -> np.ndarray:
    """Step 2: rows whose ``qpn`` differs from the registry's current QPN of ``responder_rnic``.

    RNICs missing from the registry are not judged stale (no evidence). ``responder``: codes of ``t``'s
    ``responder_rnic`` (:func:`schemas.group_codes.key`), or None to code them here; the registry is looked up
    once per distinct RNIC, not per row.
    """
    if t.num_rows == 0 or not registry:
        return np.zeros(t.num_rows, dtype=bool)
    rk = responder if responder is not None else key(t["responder_rnic"])
    cur_of = lookup_per_code(rk, registry).to_numpy(zero_copy_only=False)
    cur = np.asarray(cur_of, dtype=np.float64)[rk.codes]  # NaN: not registered
    qpn = np.asarray(t["qpn"].to_numpy(zero_copy_only=False), dtype=np.float64)
    return ~np.isnan(cur) & (cur != qpn)


def stale_qpn_step(ctx: WindowContext, registry: Mapping[str, int], background: float) -> None:
    """Step 2: timeouts of probes that carried a QPN the registry no longer lists (probe noise).

    Confidence: the significance of the stale probes' timeouts against the background loss,
    times the share of the RNIC's timeouts that carried a stale QPN (the rest need another cause).
    """
    pairs, failing = ctx.partial.pairs, ctx.partial.failing
    p_stale = stale_mask(pairs, registry, ctx.key("pairs", "responder_rnic")) & ~ctx.taken_pairs("host_down")
    ctx.take("stale_qpn", p_stale, stale_mask(failing, registry) & ~ctx.taken_failing("host_down"))
    stale_sums = sums_by(pairs, p_stale, "responder_rnic")
    if not stale_sums:
        return
    all_sums = sums_by(pairs, np.ones(pairs.num_rows, bool), "responder_rnic")
    for rn, (failed, stale_total) in sorted(stale_sums.items()):
        if failed:
            # significance of the stale probes' timeouts, times the share of the RNIC's timeouts they are
            conf = failed / max(all_sums[rn][0], 1) * significance(
                float(log_poisson_tail(failed, stale_total * background)[0]), len(all_sums))
            ctx.emit("stale_qpn", rn, failed, conf, failed, all_sums[rn][1],
                     {"stale_timeouts": failed, "stale_probes": stale_total,
                      "registry_qpn": int(registry.get(rn, -1))})
