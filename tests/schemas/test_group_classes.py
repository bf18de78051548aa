"""Classes of rows (schemas.group_codes.classes): the coarsest partition on which every key is constant; and the
step's encodings (dictionaries), equal to Arrow's dictionary encoding however they are found."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.group_codes import classes, dictionaries, key, row_ids, sums


def _partition(cls: np.ndarray) -> set[frozenset[int]]:
    return {frozenset(np.flatnonzero(cls == c).tolist()) for c in np.unique(cls)}


def test_a_key_that_is_a_function_of_the_base_adds_no_class() -> None:
    rnic = row_ids(pa.array(["A1", "A1", "B1", "A1", "B1"]))
    port = row_ids(pa.array([7, 7, 7, 9, 7], pa.uint16()))
    host = row_ids(pa.array(["A", "A", "B", "A", "B"]))  # A1 -> A, B1 -> B
    c = classes([rnic, port], [host])
    assert c.n == 3
    assert _partition(c.cls) == {frozenset({0, 1}), frozenset({2, 4}), frozenset({3})}
    assert all(c.cls[c.first[k]] == k for k in range(c.n))


def test_a_key_that_varies_inside_a_class_splits_it() -> None:
    rnic = row_ids(pa.array(["A1", "A1", "A1", "B1"]))
    pinglist = row_ids(pa.array(["tor_mesh", "service", "tor_mesh", None]))  # rows 0 and 1 differ
    c = classes([rnic], [pinglist])
    assert _partition(c.cls) == {frozenset({0, 2}), frozenset({1}), frozenset({3})}


def test_sums_over_classes_weighted_equal_sums_over_rows() -> None:
    host = pa.array(["b", "a", "b", "b", "a", "c"])
    slot = pa.array([1, 0, 1, 0, 0, 1], pa.int64())
    c = classes([row_ids(host), row_ids(slot)], [])
    first = pa.array(c.first, pa.int64())
    per_class = np.bincount(c.cls, minlength=c.n)
    got = sums(["host", "slot"], [key(host.take(first)), key(slot.take(first))], {"n": per_class})
    assert got.to_pylist() == [{"host": "a", "slot": 0, "n": 2}, {"host": "b", "slot": 0, "n": 1},
                               {"host": "b", "slot": 1, "n": 2}, {"host": "c", "slot": 1, "n": 1}]


def test_columns_compared_per_class_split_only_where_they_vary() -> None:
    rnic = row_ids(pa.array(["A1", "A1", "B1", "A1", "B1"]))
    ip = pa.chunked_array([["10.0.0.1", "10.0.0.1"], ["10.0.0.2", "10.0.0.1", "10.0.0.2"]])  # A1 -> .1, B1 -> .2
    c = classes([rnic], [], [ip])
    assert _partition(c.cls) == {frozenset({0, 1, 3}), frozenset({2, 4})}
    moved = pa.array(["10.0.0.1", "10.0.0.9", "10.0.0.2", "10.0.0.1", "10.0.0.2"])  # row 1's address differs
    assert _partition(classes([rnic], [], [moved]).cls) == {frozenset({0, 3}), frozenset({1}), frozenset({2, 4})}


def test_a_column_with_nulls_is_hashed_and_a_null_is_a_value_of_its_own() -> None:
    rnic = row_ids(pa.array(["A1", "A1", "A1", "B1"]))
    job = pa.array([None, None, "j1", "j1"])  # rows 0, 1 share the null; row 2 does not
    c = classes([rnic], [], [job])
    assert _partition(c.cls) == {frozenset({0, 1}), frozenset({2}), frozenset({3})}


def test_a_column_equal_to_its_twin_shares_its_encoding_and_one_that_is_not_is_hashed() -> None:
    t = pa.table({"agent_id": pa.chunked_array([["H2", "H1"], ["H2"]]), "prober_host": ["H2", "H1", "H2"],
                  "responder_host": ["H2", "H1", "H9"], "job_id": ["H2", None, "H2"]})
    same = {"prober_host": "agent_id", "responder_host": "agent_id", "job_id": "agent_id"}
    d = dictionaries(t, ["agent_id", "prober_host", "responder_host", "job_id"], same=same)
    assert d["prober_host"] is d["agent_id"]  # equal values: one encoding
    assert d["prober_host"].dictionary.to_pylist() == ["H2", "H1"] and d["prober_host"].indices.to_pylist() == [0, 1, 0]
    for c in t.column_names:  # each as Arrow encodes it (order of first appearance, nulls null)
        assert d[c].equals(pc.dictionary_encode(t[c].combine_chunks())), c
