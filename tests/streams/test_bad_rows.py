"""The worker's message step on bad rows, without Kafka: unknown RNICs against a registry set.

The Faust worker passes the RNICs of the ``registry`` topic (None while it is empty:
the rule is off); ``test_bad_input_kafka.py`` runs the same rule through the real worker.
"""

from __future__ import annotations

from schemas.arrow_nano import encode_columns
from schemas.probe_rows.messages import process_probe_message

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


def test_a_step_of_messages_validates_in_one_pass_with_the_outcome_of_each_message_alone():
    from schemas.probe_rows.messages import process_probe_messages

    # message 5: seq 1 twice (a repeat) and an unknown responder; message 6: seq 0 and 1 again (not repeats
    # across messages) and a negative t5-t2; message 7: not Arrow at all; message 8: every row good
    neg = probe_row(3, t1=BASE_NS, t2=PROBER_RNIC0 + 9_000, t3=RESPONDER_RNIC0 + 4_000,
                    t4=RESPONDER_RNIC0 + 6_000, t5=PROBER_RNIC0 + 1_000, t6=BASE_NS + 15_000)
    msgs = [
        (encode_columns("probe.v1", columns([_ok(0, "A1", "A2"), _ok(1, "A1", "A2"), _ok(1, "A1", "A2"),
                                             _ok(2, "A1", "Z9")])), "probe.v1", "probes.raw", 0, 5),
        (encode_columns("probe.v1", columns([_ok(0, "A1", "A2"), neg, _ok(1, "A2", "A1")])),
         "probe.v1", "probes.raw", 0, 6),
        (b"not arrow", "probe.v1", "probes.raw", 0, 7),
        (encode_columns("probe.v1", columns([_ok(4, "A2", "A1")])), "probe.v1", "probes.raw", 1, 8),
    ]
    step = process_probe_messages(msgs, known_rnics={"A1", "A2"})
    alone = [process_probe_message(*m, known_rnics={"A1", "A2"}) for m in msgs]
    assert [r.enriched["seq"].to_pylist() if r.enriched else None for r in step] == [[0, 1], [0, 1], None, [4]]
    assert [r.enriched["batch_id"].to_pylist() if r.enriched else None for r in step] == [
        ["probes.raw/0/5"] * 2, ["probes.raw/0/6"] * 2, None, ["probes.raw/1/8"]]
    assert step[0].dead["row"].to_pylist() == [2, 3]
    assert step[0].dead["reason"].to_pylist() == [
        "duplicate (agent_id, seq) in the batch", "unknown RNIC 'Z9' in responder_rnic (not in the registry)"]
    assert step[1].dead["reason"].to_pylist() == ["negative t5-t2 on the prober RNIC clock"]
    assert step[2].dead.num_rows == 1 and step[3].dead is None
    for s, a in zip(step, alone, strict=True):
        assert (s.enriched is None) == (a.enriched is None) and (s.enriched is None or s.enriched.equals(a.enriched))
        assert (s.dead is None) == (a.dead is None)
        if s.dead is not None:  # received_ns is the wall clock of the call
            assert s.dead.drop(["received_ns"]).equals(a.dead.drop(["received_ns"]))
