"""MaskedInts (schemas/arrow_nano.py): a nullable integer column as machine integers and a sentinel encodes to the
same Arrow values as the list with None, whatever the nulls' places and the column's length."""

from __future__ import annotations

import random
from array import array

import pytest

from schemas.arrow_nano import MaskedInts, encode_columns
from schemas.codec import decode
from schemas.records import PROBE_V1

ABSENT = -(2**63)


def _columns(n: int, t5: MaskedInts | list[int | None]) -> dict[str, object]:
    cols: dict[str, object] = {f.name: ([0] * n if "int" in f.type else ["x"] * n) for f in PROBE_V1.fields}
    cols["job_id"] = [None] * n
    for t in ("t1", "t2", "t3", "t4", "t6"):
        cols[t] = [None] * n
    cols["t5"] = t5
    return cols


@pytest.mark.parametrize("n, null_share", [(1, 0.0), (1, 1.0), (7, 0.5), (8, 0.5), (9, 0.3), (1200, 0.02),
                                           (1200, 0.0), (1201, 1.0), (64, 0.9)])
def test_masked_ints_encode_as_the_list_with_nones(n: int, null_share: float) -> None:
    rnd = random.Random(n * 1000 + int(null_share * 100))
    values = [None if rnd.random() < null_share else rnd.randrange(-(2**62), 2**62) for _ in range(n)]
    masked = MaskedInts(array("q", [ABSENT if v is None else v for v in values]), ABSENT)
    assert list(masked) == values and len(masked) == n and masked[n - 1] == values[-1]
    _, got = decode(encode_columns(PROBE_V1.key, _columns(n, masked)), PROBE_V1.key)
    _, want = decode(encode_columns(PROBE_V1.key, _columns(n, values)), PROBE_V1.key)
    assert got["t5"].to_pylist() == values
    assert got["t5"].null_count == values.count(None)
    assert got.equals(want)


def test_masked_ints_with_a_null_for_a_field_that_is_not_nullable_is_refused() -> None:
    cols = _columns(3, [1, 2, 3])
    cols["upload_ns"] = MaskedInts(array("q", [1, ABSENT, 3]), ABSENT)
    with pytest.raises(ValueError, match="'upload_ns' is not nullable"):
        encode_columns(PROBE_V1.key, cols)
