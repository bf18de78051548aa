"""`bench raw-layout`: every layout's DDL is a table the engine takes, and a stale one is refused by name."""

from __future__ import annotations

import dataclasses
import time

import pyarrow as pa
import pytest

from bench import raw_layout


@pytest.mark.parametrize("name", sorted(raw_layout.LAYOUTS))
def test_each_layout_creates_a_probes_table_that_takes_the_writers_rows(migrated_store, name: str) -> None:
    store = migrated_store
    layout = raw_layout.LAYOUTS[name]
    ddl = raw_layout.layout_ddl(layout)
    for old, new in layout.swaps:
        assert new in ddl and (old not in ddl or old in new)
    store.command("DROP TABLE probes SYNC")
    store.command(ddl)
    row = {"agent_id": "a", "upload_ns": 1, "seq": 1, "pinglist": "tor_mesh", "prober_host": "h",
           "prober_rnic": "r1", "responder_host": "g", "responder_rnic": "r2", "src_ip": "10.0.0.1",
           "dst_ip": "10.0.0.2", "src_port": 1, "dst_port": 4791, "flow_label": 0, "traffic_class": 0,
           "priority": 0, "qpn": 1, "gid_index": 3, "t1": None, "ts_source": "sim", "status": "timeout",
           "batch_id": "b"}
    row["upload_ns"] = time.time_ns()
    store.insert_arrow("probes", pa.Table.from_pylist([row]), dedup_token="t")
    store.insert_arrow("probes", pa.Table.from_pylist([row]), dedup_token="t")  # a replay: a no-op in every layout
    assert store.query_arrow("SELECT count() AS n FROM probes")["n"].to_pylist() == [1]


def test_a_stale_layout_names_the_text_it_no_longer_finds() -> None:
    stale = dataclasses.replace(raw_layout.LAYOUTS["lz4-base-8"], swaps=(("CODEC(Gorilla)", "CODEC(LZ4)"),))
    with pytest.raises(ValueError, match=r"layout lz4-base-8: 'CODEC\(Gorilla\)' is not in schemas/ddl/001_probes.sql"):
        raw_layout.layout_ddl(stale)


def test_unknown_layout_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="unknown layout.*nope.*known: shipped"):
        raw_layout.run(["shipped", "nope"], 10, 10)
