"""The decode guard (schemas.ipc_guard): it rejects exactly what Arrow's full validation rejects.

Hand-built broken arrays (decreasing offsets, a null count that disagrees with the bitmap, invalid
UTF-8, a UTF-8 character split across two values) and a fuzz over byte corruptions of valid payloads
(ASCII and non-ASCII strings, nulls) comparing :func:`check_table` with ``validate(full=True)`` on
every table the IPC reader returns. Bounded: a few hundred inputs, each counted.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.arrow_nano import encode_columns
from schemas.codec import TruncatedPayloadError, decode
from schemas.ipc_guard import check_table
from schemas.probe_rows.messages import process_probe_message

from conftest import REPO
from probe_rows import columns, known_rows

FUZZ = settings(max_examples=700, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def _strings(offsets: list[int], data: bytes, nulls: list[bool] | None = None, null_count: int = -1) -> pa.Array:
    """A string array from raw buffers, unvalidated (as a corrupt payload would read)."""
    bitmap = None
    if nulls is not None:
        bitmap = pa.py_buffer(np.packbits(np.array([not x for x in nulls], bool), bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1,
                                 [bitmap, pa.py_buffer(np.array(offsets, np.int32).tobytes()), pa.py_buffer(data)],
                                 null_count=null_count)


def _rejects_like_arrow(t: pa.Table) -> bool:
    """check_table raises iff validate(full=True) does; returns whether it raised."""
    try:
        t.validate(full=True)
        arrow_ok = True
    except ValueError:  # ArrowInvalid, or a message that is not UTF-8 itself (a corrupt field name)
        arrow_ok = False
    try:
        check_table(t)
        ours_ok = True
    except ValueError:
        ours_ok = False
    assert ours_ok == arrow_ok, f"guard {'accepts' if ours_ok else 'rejects'}, Arrow's full validation does not"
    return not ours_ok


@pytest.mark.parametrize("arr, why", [
    (_strings([0, 3, 1, 5], b"abcde"), "offsets decrease"),
    (_strings([0, 2, 4], b"a\xffcd"), "invalid UTF-8"),
    (_strings([0, 1, 3], "aé".encode()[:2] + b"x"), "a character cut in two (one value ends in a lead byte)"),
    (_strings([0, 1, 2], b"ab", nulls=[False, False], null_count=1), "null count 1, no null in the bitmap"),
    (pa.Array.from_buffers(pa.int64(), 3, [pa.py_buffer(b"\x05"), pa.py_buffer(np.arange(3).tobytes())],
                           null_count=2), "int64: null count 2, one null in the bitmap"),
])
def test_broken_arrays_are_rejected_as_arrow_rejects_them(arr, why):
    assert _rejects_like_arrow(pa.table({"c": arr})), why


@pytest.mark.parametrize("arr", [
    pa.array(["hé", None, "日本", ""]),  # non-ASCII, valid: Arrow's UTF-8 check runs and accepts
    pa.array(["a", "bc", None] * 100).slice(7, 50),  # an offset into the buffers
    pa.array([1, None, 3], pa.int64()).slice(1),
    pa.array([b"\xff\x00", b""], pa.binary()),  # bytes: no UTF-8 rule
    pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(np.array([0, 1, 2, 3], np.int32).tobytes() + b"\x00"),
                                           pa.py_buffer(b"abc")]),  # offsets buffer longer than needed, odd size
    pa.array([["x"], None], pa.list_(pa.string())),  # other types: Arrow's full validation
])
def test_valid_arrays_are_accepted(arr):
    assert not _rejects_like_arrow(pa.table({"c": arr}))


def test_a_corrupt_string_column_is_a_dead_letter_of_the_worker():
    rows, _ = known_rows()
    t = pa.Table.from_pylist(rows, schema=decode(encode_columns("probe.v1", columns(rows)))[1].schema)
    bad = t.set_column(t.schema.get_field_index("prober_rnic"), t.schema.field("prober_rnic"),
                       _strings([0, 2, 1, 4], b"A1A2"))
    payload = _ipc(bad)
    with pytest.raises(TruncatedPayloadError, match="not a complete Arrow IPC stream.*offsets decrease"):
        decode(payload, "probe.v1")
    code = ("import sys, logging\nlogging.disable(logging.CRITICAL)\n"
            "from schemas.probe_rows.messages import process_probe_message\n"
            "r = process_probe_message(sys.stdin.buffer.read(), 'probe.v1', 'probes.raw', 0, 1)\n"
            "assert r.enriched is None and r.dead is not None\nprint(r.dead['reason'][0].as_py())\n")
    run = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=60,
                         cwd=REPO)  # a child: a crash is a failed test, not a dead run
    assert run.returncode == 0, run.stderr[-2000:]
    assert b"offsets decrease" in run.stdout


def _payloads() -> list[bytes]:
    rows, _ = known_rows()
    ascii_payload = encode_columns("probe.v1", columns(rows))
    wide = [dict(r, agent_id="hôte-é", prober_host="hôte-é", job_id="job-日本" if i else None)
            for i, r in enumerate(rows)]
    return [ascii_payload, encode_columns("probe.v1", columns(wide))]


PAYLOADS = _payloads()
tried = {"read": 0, "rejected": 0}


@FUZZ
@given(which=st.integers(0, len(PAYLOADS) - 1),
       edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_guard_agrees_with_full_validation_on_corrupted_payloads(which, edits):
    b = bytearray(PAYLOADS[which])
    for pos, val in edits:
        b[pos % len(b)] = val
    try:
        t = pa.ipc.open_stream(bytes(b)).read_all()
    except (pa.ArrowException, OSError, ValueError, IndexError, OverflowError):
        return  # the reader refused it: decode's guard never sees it
    tried["read"] += 1
    tried["rejected"] += _rejects_like_arrow(t)
    logging.disable(logging.CRITICAL)
    try:
        r = process_probe_message(bytes(b), "probe.v1", "probes.raw", 0, 1)  # and the step survives it
    finally:
        logging.disable(logging.NOTSET)
    assert r.enriched is not None or r.dead is not None or t.num_rows == 0


def test_guard_fuzz_counts(capsys):
    """Prints the counts (after the property, in file order): the property must have read and rejected tables."""
    with capsys.disabled():
        print(f"\nfuzz ipc guard: {tried['read']} corrupted payloads read back, {tried['rejected']} rejected, "
              "each exactly as Arrow's full validation")
    assert tried["read"] >= 50 and tried["rejected"] >= 5  # about 1 in 5 corruptions reads back
