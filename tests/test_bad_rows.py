"""The worker's message step on bad rows, without Kafka: unknown RNICs against a registry set.

The Faust worker passes the RNICs of the ``registry`` topic (None while it is empty:
the rule is off); ``test_bad_input_kafka.py`` runs the same rule through the real worker.
"""

from __future__ import annotations

from schemas.arrow_nano import encode_columns
from streams.runtime.probe_batch import process_probe_message

from probe_rows import BASE_NS, PROBER_RNIC0, RESPONDER_RNIC0, columns, probe_row


def _ok(seq: int, src: str, dst: str) -> dict:
    return probe_row(seq, t1=BASE_NS, t2=PROBER_RNIC0 + 1_000, t3=RESPONDER_RNIC0 + 4_000,
                     t4=RESPONDER_RNIC0 + 6_000, t5=PROBER_RNIC0 + 13_000, t6=BASE_NS + 15_000, src=src, dst=dst)


def test_unknown_rnics_are_dead_letters_and_known_ones_flow():
    payload = encode_columns("probe.v1", columns([_ok(0, "A1", "A2"), _ok(1, "A1", "Z9"), _ok(2, "Q7", "A2")]))
    r = process_probe_message(payload, "probe.v1", "probes.raw", 0, 5, known_rnics={"A1", "A2"})
    assert r.enriched["seq"].to_pylist() == [0]
    assert r.enriched["batch_id"].to_pylist() == ["probes.raw/0/5"]
    assert r.dead["row"].to_pylist() == [1, 2]
    assert r.dead["reason"].to_pylist() == [
        "unknown RNIC 'Z9' in responder_rnic (not in the registry)",
        "unknown RNIC 'Q7' in prober_rnic (not in the registry)",
    ]
    off = process_probe_message(payload, "probe.v1", "probes.raw", 0, 5, known_rnics=None)
    assert off.dead is None and off.enriched.num_rows == 3
