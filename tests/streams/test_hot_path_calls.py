"""Per-row Python work on the hot path is a defect: the Python function calls spent on one
probe batch must not grow with its row count (checked with cProfile)."""

from __future__ import annotations

import cProfile
import pstats

from producers.bulk import bulk_probe_columns
from schemas.arrow_pa import table_from_columns
from schemas.codec import encode
from schemas.probe_rows.messages import process_probe_message


def _calls(n_rows: int) -> int:
    payload = encode(table_from_columns("probe.v1", bulk_probe_columns(n_rows, seed=1, start_ns=10**18)))
    process_probe_message(payload, "probe.v1", "probes.raw", 0, 0)  # warm caches and imports
    prof = cProfile.Profile()
    prof.enable()
    result = process_probe_message(payload, "probe.v1", "probes.raw", 0, 1)
    prof.disable()
    assert result.dead is None and result.enriched.num_rows == n_rows
    return pstats.Stats(prof).total_calls


def test_calls_per_batch_do_not_grow_with_rows():
    small, large = _calls(10_000), _calls(200_000)
    assert large == small, (small, large)
