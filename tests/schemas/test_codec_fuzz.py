"""Fuzzing the Kafka codec and the worker's message step: bad bytes become dead letters, never a crash.

Bounded (a few hundred inputs per property, no deadline); each property prints how
many inputs it tried. Inputs that once crashed the worker are kept under
``tests/fixtures/codec_crashes/`` and replayed in a child process, so a
segmentation fault shows as a failed test, not a dead test run:

- ``segfault-*.bin``: one-to-four-byte corruptions of a valid ``probe.v1`` batch that the
  IPC reader accepted and that crashed (SIGSEGV) the validation kernels; fixed by full
  Arrow validation in :func:`schemas.codec.decode`.
- ``arrowinvalid-*.bin``: corruptions that raised ``ArrowInvalid`` (not a ``CodecError``)
  out of ``decode``, which would have stopped the Faust agent.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.arrow_nano import encode_columns
from schemas.codec import CodecError, decode, schema_key_from_headers
from schemas.probe_rows.messages import process_probe_message

from conftest import REPO
from probe_rows import columns, known_rows

CRASHES = REPO / "tests" / "fixtures" / "codec_crashes"
VALID = encode_columns("probe.v1", columns(known_rows()[0]))
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
tried: dict[str, int] = {}


def _count(name: str) -> None:
    tried[name] = tried.get(name, 0) + 1


def _report(capsys: pytest.CaptureFixture[str], name: str) -> None:
    with capsys.disabled():
        print(f"\nfuzz {name}: {tried.get(name, 0)} inputs tried, no crash")


def _step(payload: bytes, header: str | None = "probe.v1") -> None:
    """The worker's whole step; it must return, with every input row accounted for."""
    r = process_probe_message(payload, header, "probes.raw", 0, 1)
    assert r.enriched is not None or r.dead is not None or _decodes_empty(payload, header)
    if r.dead is not None:
        assert all(isinstance(x, str) and x for x in r.dead["reason"].to_pylist())


def _decodes_empty(payload: bytes, header: str | None) -> bool:
    try:
        return decode(payload, header)[1].num_rows == 0
    except CodecError:
        return False


def test_kept_crashing_inputs_are_dead_letters_now():
    files = sorted(CRASHES.glob("*.bin"))
    assert len(files) == 5
    code = (
        "import sys, logging\nlogging.disable(logging.CRITICAL)\n"
        "from schemas.probe_rows.messages import process_probe_message\n"
        "for path in sys.argv[1:]:\n"
        "    r = process_probe_message(open(path, 'rb').read(), 'probe.v1', 'probes.raw', 0, 1)\n"
        "    assert r.enriched is None and r.dead is not None, path\n"
        "    print(r.dead['reason'][0].as_py())\n"
    )
    run = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    reasons = run.stdout.splitlines()
    assert len(reasons) == 5
    assert all("not a complete Arrow IPC stream" in r for r in reasons)


@FUZZ
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes_decode_or_raise_codec_error(data):
    _count("arbitrary bytes")
    with contextlib.suppress(CodecError):
        decode(data, "probe.v1")
    _step(data)


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.integers(0, len(VALID)))
def test_corrupted_valid_batches_never_crash_the_worker_step(edits, cut):
    _count("corrupted batches")
    b = bytearray(VALID)
    for pos, val in edits:
        b[pos] = val
    _step(bytes(b[:cut]) if cut < 64 else bytes(b))


@FUZZ
@given(header=st.one_of(st.none(), st.text(max_size=20)), raw_header=st.binary(max_size=20))
def test_any_schema_header_is_handled(header, raw_header):
    _count("schema headers")
    key = schema_key_from_headers([("schema", raw_header)])
    assert isinstance(key, str)
    _step(VALID, header)
    _step(VALID, key)


def test_fuzz_counts(capsys):
    """Prints the counts (runs after the properties in file order)."""
    for name in ("arbitrary bytes", "corrupted batches", "schema headers"):
        _report(capsys, name)
        assert tried.get(name, 0) >= 100
