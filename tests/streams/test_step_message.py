"""The ``window.partials`` step format: round trip, parts, and clear errors on anything else."""

from __future__ import annotations

import pytest

from streams.pingmesh.step_message import (
    Step,
    StepFormatError,
    UploadMark,
    decode_body,
    encode_step,
    format_ranges,
    parse_ranges,
    part_of,
)

STEP = Step({2: (3, 7), 0: (10, 15)}, {40: b"\x00" * 700, 20: b"\x01" * 500},
            [(0, UploadMark("H1", 25, "H1")), (2, UploadMark("H2", 30, None))])


def test_a_step_round_trips_whole_and_in_parts():
    (headers, value), = encode_step(STEP)
    h = dict(headers)
    assert h["format"] == b"window_step.v1" and h["part"] == b"0/1" and h["upload_ns"] == b"30"
    assert h["ranges"] == b"0:10-15,2:3-7"
    part = part_of(h)
    assert part.ranges == {0: (10, 15), 2: (3, 7)} and (part.index, part.count) == (0, 1)
    assert decode_body(part.ranges, value) == Step(part.ranges, STEP.partials, STEP.marks)
    meta = b'{"marks":[[0,"H1",25,"H1"],[2,"H2",30,null]],"windows":[[20,500],[40,700]]}'
    assert value == len(meta).to_bytes(4, "big") + meta + b"\x01" * 500 + b"\x00" * 700  # 1279 bytes
    parts = encode_step(STEP, max_bytes=256)
    assert [dict(h)["part"] for h, _ in parts] == [f"{i}/5".encode() for i in range(5)]
    assert len({dict(h)["step_id"] for h, _ in parts}) == 1
    assert b"".join(v for _, v in parts) == value


def test_ranges_parse_back_and_bad_ones_are_named():
    assert parse_ranges(format_ranges({1: (0, 0), 0: (5, 9)})) == {0: (5, 9), 1: (0, 0)}
    with pytest.raises(StepFormatError, match="bad ranges header b'0:9-5'"):
        parse_ranges(b"0:9-5")
    with pytest.raises(StepFormatError, match="want 'partition:first-last"):
        parse_ranges(b"0:5")
    with pytest.raises(ValueError, match="at least one raw offset range"):
        encode_step(Step({}, {}, []))


def test_other_messages_are_refused_with_the_reason():
    headers = dict(encode_step(STEP)[0][0])
    old = {"agent_id": b"H1", "upload_ns": b"5", "window_start_ns": b"", "src_partition": b"0"}
    with pytest.raises(StepFormatError, match="format None, want b'window_step.v1'"):
        part_of(old)
    with pytest.raises(StepFormatError, match="without the 'ranges' header"):
        part_of({k: v for k, v in headers.items() if k != "ranges"})
    with pytest.raises(StepFormatError, match="bad part header b'x'"):
        part_of({**headers, "part": b"x"})
    with pytest.raises(StepFormatError, match="part 3/2: index out of range"):
        part_of({**headers, "part": b"3/2"})
    (_, value), = encode_step(STEP)
    with pytest.raises(StepFormatError, match="its index says"):
        decode_body({0: (0, 0)}, value[:-1])
    with pytest.raises(StepFormatError, match="step body not readable"):
        decode_body({0: (0, 0)}, b"\x00\x00\x00\x05{bad}")
