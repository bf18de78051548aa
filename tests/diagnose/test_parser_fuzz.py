"""Fuzzing the artifact parsers behind ``fabricscope diagnose``: mangled field cases never crash them.

Each input is one of the field cases in ``tests/diagnose/fixtures/cases`` or the real outputs in
``tests/diagnose/fixtures/artifacts`` with lines deleted,
repeated, truncated, their numbers replaced (0, -1, huge) or their words swapped
for parser keywords. ``diagnose_text`` must return findings (a list), whatever
it gets, and so must every collector of the registry called directly (parse, then
findings), whether or not its ``detect`` accepts the text, and the unread-section split. Bounded (1000 inputs, no
deadline); prints the count tried. A crashing input found here is to be kept under
``tests/diagnose/fixtures/parser_crashes/`` as a test.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnose.registry import COLLECTORS
from diagnose.run import diagnose_text
from diagnose.unread import unread_sections

from conftest import REPO

CASES = sorted((REPO / "tests" / "diagnose" / "fixtures" / "cases").glob("case_*.txt"))
CASES += sorted((REPO / "tests" / "diagnose" / "fixtures" / "artifacts").glob("*.txt"))
WORDS = [
    "",
    "x",
    "NaN",
    "Gen",
    "GT/s",
    "Width",
    "LnkSta:",
    "Xid",
    "NCCL WARN",
    "rx_prio3_pause",
    "busy",
    "status=",
    "vendor err",
    "localGid",
    "remoteGids",
    "GID[",
    "v2",
    "inet6",
    "mtu",
    "synd 0x",
    "dgid",
    "Port module event[error]:",
    "fallen off the bus",
    "NVRM:",
    "BW Test",
    "#bytes",
    "PIX",
    "SYS",
    "pcie.link.gen.current",
    "Next Boot",
    "roce_tx_window_en",
    "Link down",
    "GDRDMA",
    "Disabled for HCA",
]
tried = {"n": 0, "collectors": set()}

edit = st.tuples(
    st.integers(0, 5),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.sampled_from(["0", "-1", "99999999999", "7"]),
    st.sampled_from(WORDS),
    st.text(alphabet="0123456789abcdef:.x-=/ \t()[]%", max_size=40),
)


def _mangle(text: str, edits: list[tuple[int, int, int, str, str, str]]) -> str:
    lines = text.splitlines()
    for op, i, j, num, word, junk in edits:
        if not lines:
            break
        i %= len(lines)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[j % len(lines)])
        elif op == 2:
            lines[i] = re.sub(r"\d+", num, lines[i])
        elif op == 3:
            lines[i] = lines[i][: j % (len(lines[i]) + 1)]
        elif op == 4:
            lines[i] = re.sub(r"[A-Za-z]+", word, lines[i], count=1)
        else:
            lines[i] = junk
    return "\n".join(lines)


@pytest.mark.skipif(not CASES, reason="no field cases under tests/diagnose/fixtures/cases")
@settings(max_examples=1000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.integers(0, 1000), edits=st.lists(edit, min_size=1, max_size=6))
def test_mangled_field_cases_never_crash_the_parsers(case, edits):
    tried["n"] += 1
    text = _mangle(CASES[case % len(CASES)].read_text(), edits)
    assert isinstance(diagnose_text(text, "fuzz"), list)
    for c in COLLECTORS:
        assert isinstance(c.findings(c.parse(text)), list), c.NAME
        assert c.detect(text) in (True, False), c.NAME
        tried["collectors"].add(c.NAME)
    parts = unread_sections(text, "fuzz", [c.detect for c in COLLECTORS], read_any=False)
    assert all(1 <= u.first_line <= u.last_line for u in parts)


@pytest.mark.skipif(not CASES, reason="no field cases under tests/diagnose/fixtures/cases")
def test_parser_fuzz_count(capsys):
    with capsys.disabled():
        print(f"\nfuzz artifact parsers: {tried['n']} mangled inputs x {len(tried['collectors'])} collectors, no crash")
    assert tried["n"] >= 300
    assert tried["collectors"] == {c.NAME for c in COLLECTORS}
