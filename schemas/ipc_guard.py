"""The memory-safety check of a decoded IPC payload: what ``Table.validate(full=True)`` checks, faster.

The IPC reader checks framing, not contents: a corrupt offset or null count reads "fine" and then
crashes (segfaults) the first kernel that trusts it (tests/fixtures/codec_crashes). Arrow's full
validation catches all of it, but on the worker's probe batches it cost about two thirds of
:func:`schemas.codec.decode` (~65 ns per ``probe.v1`` row): most of it is the UTF-8 check of every
string value, one value at a time.

:func:`check_table` accepts exactly what ``validate(full=True)`` accepts, checking the columns of flat
types (integers, floats, booleans, temporal, strings and binaries) itself, vectorised:

- Arrow's cheap ``validate()`` first: buffer sizes, lengths, the first and last offset of each
  variable-length array within its data;
- the null count of every array against its validity bitmap (a kernel sizes its output by it);
- offsets non-decreasing (a negative length reads outside the data);
- strings valid UTF-8: when every byte of the array's data is ASCII (below 0x80) they are, in one
  numpy pass over the bytes; otherwise Arrow's own per-value check of that array.

Any other type (lists, maps, structs, dictionaries) is checked by Arrow's full validation of that array.
Source: Arrow C++ ``ValidateFull`` (arrow/array/validate.cc), which does the same three checks for these
types.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def check_table(table: pa.Table) -> None:
    """Raise ``pyarrow.ArrowInvalid`` where ``table.validate(full=True)`` would; else return.

    Args:
        table: as read from an IPC stream (any types, any chunking).

    Raises:
        pyarrow.ArrowInvalid: the table is structurally broken (the message names the column and why).
    """
    table.validate()
    for name, col in zip(table.column_names, table.columns, strict=True):
        for arr in col.chunks:
            _check_array(name, arr)


def _kind(t: pa.DataType) -> str:
    """'fixed' (integers, floats, booleans, temporal), 'utf8' / 'bytes' (32-bit offsets), 'large_utf8' /
    'large_bytes' (64-bit offsets), or 'other' (checked by Arrow's full validation)."""
    kind = _KINDS.get(t)
    if kind is None:
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
            kind = "fixed"
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            kind = "large_utf8" if pa.types.is_large_string(t) else "utf8"
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            kind = "large_bytes" if pa.types.is_large_binary(t) else "bytes"
        else:
            kind = "other"
        _KINDS[t] = kind
    return kind


_KINDS: dict[pa.DataType, str] = {}


def _check_array(name: str, arr: pa.Array) -> None:
    # numpy views through memoryview(): half the cost of numpy reading an Arrow buffer's own buffer protocol
    kind = _kind(arr.type)
    if kind == "other":
        arr.validate(full=True)
        return
    n = len(arr)
    if n == 0:
        return
    bufs = arr.buffers()
    if arr.null_count or bufs[0] is not None:
        _check_nulls(name, arr, bufs[0], n)
    if kind == "fixed":
        return
    width = 8 if kind.startswith("large") else 4
    # the slots the array spans only (the buffer may be longer, and not a whole number of offsets)
    offsets = np.frombuffer(memoryview(bufs[1])[arr.offset * width:(arr.offset + n + 1) * width],
                            dtype=np.int64 if width == 8 else np.int32)
    if len(offsets) != n + 1:
        raise pa.ArrowInvalid(f"column {name}: offsets buffer too small for {n} values")
    if (offsets[1:] < offsets[:-1]).any():
        raise pa.ArrowInvalid(f"column {name}: offsets decrease (a negative value length)")
    first, last = int(offsets[0]), int(offsets[-1])
    # plain ASCII is valid UTF-8 (one SIMD pass over the bytes); else Arrow checks each value
    if kind.endswith("utf8") and last > first and bufs[2] is not None and \
            int(np.frombuffer(memoryview(bufs[2]), dtype=np.uint8)[first:last].max()) >= 0x80:
        arr.validate(full=True)


def _check_nulls(name: str, arr: pa.Array, bitmap: pa.Buffer | None, n: int) -> None:
    """The array's null count equals the zero bits of its validity bitmap over its ``n`` slots."""
    declared = arr.null_count
    if bitmap is None:
        if declared != 0:
            raise pa.ArrowInvalid(f"column {name}: null count {declared} but no validity bitmap")
        return
    off = arr.offset
    bits = np.frombuffer(memoryview(bitmap), dtype=np.uint8)[off // 8:(off + n + 7) // 8 + 1]
    valid = np.unpackbits(bits, bitorder="little")[off % 8:off % 8 + n]
    if len(valid) != n:
        raise pa.ArrowInvalid(f"column {name}: validity bitmap too small for {n} values")
    actual = n - int(np.count_nonzero(valid))
    if actual != declared:
        raise pa.ArrowInvalid(f"column {name}: null count {declared} but the bitmap has {actual} nulls")
