"""The worker's stored rows on the wire with dictionary-encoded strings: the same rows reach the reader and
the store (``streams.runtime.enriched_wire``, ``schemas.codec.decode(dictionary_strings=...)``)."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer

from producers.sim.fabrics import panel1
from schemas.arrow_pa import table_from_columns
from schemas.codec import WIRE_DICTIONARY, SchemaMismatchError, TruncatedPayloadError, decode, encode
from schemas.group_codes import dictionaries
from schemas.headers import headers_for
from streams.pingmesh.links import PathIndex
from streams.pingmesh.windows import WINDOW_NS
from streams.runtime.enriched_wire import COLUMNS, RUN_VALUES, dictionary_tables
from streams.runtime.probe_step import RawMessage, process_step

sim = pytest.importorskip("producers.sim")

S = 1_000_000_000
T0 = (time.time_ns() // (3600 * S) - 1) * 3600 * S  # recent: the tables' TTLs drop old rows at insert
ENRICHED = "probe_enriched.v1"
STRINGS = ("agent_id", "pinglist", "prober_host", "prober_rnic", "responder_host", "responder_rnic", "src_ip",
           "dst_ip", "job_id", "ts_source", "status", "batch_id")


def _steps(rounds: int) -> list:
    """Per round, one worker step over every agent's upload of Panel 1 (several messages, two partitions):
    the step's output and its messages."""
    s = sim.Simulator(panel1(), seed=11)
    index, steps, offsets = PathIndex(), [], [0, 0]
    for k in range(rounds):
        raws = []
        for i, (_agent, probe_cols, path_cols) in enumerate(s.upload_batches(T0 + k * 5 * S)):
            index.update(table_from_columns("path.v1", path_cols))
            part = i % 2
            raws.append(RawMessage(encode(table_from_columns("probe.v1", probe_cols)), "probe.v1", "probes.raw",
                                   part, offsets[part]))
            offsets[part] += 1
        steps.append(process_step(raws, index, WINDOW_NS))
    return steps


def test_each_message_reads_back_as_its_stored_rows_with_strings_a_few_bytes_each():
    out = _steps(1)[0]
    assert len(out.messages) > 2 and set(out.encoded) >= {"prober_rnic", "responder_rnic", "batch_id"}
    wire = dictionary_tables([(m.enriched, m.stored) for m in out.messages], out.encoded)
    for m, w in zip(out.messages, wire, strict=True):
        assert w is not None and m.stored is not None
        for name in STRINGS:
            t = w.schema.field(name).type
            if name not in COLUMNS:
                assert t == pa.string(), name
                continue
            assert pa.types.is_dictionary(t) and t.index_type in (pa.int8(), pa.int16()), name
            # the message's dictionary holds the values it uses, and at most a short run of others
            used = set(pc.unique(m.stored[name]).drop_null().to_pylist())
            dictionary = w[name].chunk(0).dictionary.to_pylist()
            assert used <= set(dictionary), name
            assert len(dictionary) <= max(RUN_VALUES, m.stored.num_rows // 4), name
        assert w.schema.metadata == m.stored.schema.metadata
        payload = encode(w)
        key, plain = decode(payload, ENRICHED)
        assert key == ENRICHED and plain.equals(m.stored)  # plain strings again, every value equal
        _, coded = decode(payload, ENRICHED, dictionary_strings=True)
        assert [n for n in STRINGS if coded.schema.field(n).type == WIRE_DICTIONARY] == list(COLUMNS)
        assert _plain(coded).equals(m.stored)
        # 8 string columns at one or two bytes each instead of their text and 4-byte offsets
        assert len(payload) < 0.8 * len(encode(m.stored))


def _plain(t: pa.Table) -> pa.Table:
    return pa.table({n: (t[n].cast(pa.string()) if pa.types.is_dictionary(t[n].type) else t[n])
                     for n in t.column_names}).cast(decode(encode(t), ENRICHED)[1].schema)


def test_a_subset_of_a_message_a_message_without_rows_and_nulls_are_encoded_exactly():
    """``anomalies`` retention stores a subset of a message's rows: encoded on its own; a message with no
    good rows has nothing to send; a null stays null; columns the step did not encode are encoded here."""
    out = _steps(1)[0]
    e0, e1 = out.messages[0].enriched, out.messages[1].enriched
    assert e0 is not None and e1 is not None
    # a null in a dictionary column (the schema forbids it in these; the encoding must still keep it)
    e0 = e0.set_column(e0.schema.get_field_index("responder_host"), e0.schema.field("responder_host"),
                       pa.array(["h-7" if i % 3 == 0 else None for i in range(e0.num_rows)], pa.string()))
    step = pa.concat_tables([e0, e1])
    codes = dictionaries(step, ("prober_rnic", "responder_rnic", "responder_host"))
    keep = pa.array([i % 5 == 0 for i in range(e1.num_rows)])
    subset = e1.filter(keep)
    wire = dictionary_tables([(e0, e0), (None, None), (e1, subset)], codes)
    assert wire[1] is None
    assert decode(encode(wire[0]), ENRICHED)[1].equals(e0)
    assert wire[0]["responder_host"].null_count == e0.num_rows - (e0.num_rows + 2) // 3
    assert wire[0]["responder_host"].chunk(0).dictionary.to_pylist() == ["h-7"]
    assert decode(encode(wire[2]), ENRICHED)[1].equals(subset)
    # the subset's dictionary is its own, not its message's
    assert len(wire[2]["responder_rnic"].chunk(0).dictionary) == len(pc.unique(subset["responder_rnic"]))


def test_dictionary_columns_of_the_wrong_kind_are_refused():
    out = _steps(1)[0]
    stored = out.messages[0].stored
    assert stored is not None
    i = stored.schema.get_field_index("prober_rnic")
    ints = pc.dictionary_encode(pa.array(range(stored.num_rows), pa.int64()))
    bad = stored.set_column(i, pa.field("prober_rnic", ints.type), ints)
    with pytest.raises(SchemaMismatchError, match="prober_rnic"):
        decode(encode(bad), ENRICHED)
    # indices pointing past the dictionary: full validation refuses them before anything reads them
    good = pc.dictionary_encode(stored["prober_rnic"]).combine_chunks()
    past = pa.DictionaryArray.from_arrays(pa.array([len(good.dictionary) + 5] * stored.num_rows, pa.int32()),
                                          good.dictionary, safe=False)
    with pytest.raises(TruncatedPayloadError):
        decode(encode(stored.set_column(i, pa.field("prober_rnic", past.type), past)), ENRICHED)


def _rows_stored(store) -> dict[str, list]:  # noqa: ANN001
    """Every row of ``probes`` (in a fixed order) and the probes each tier counts (the tiers come from the
    minute messages, which this change leaves as they were)."""
    cols = store.query_arrow("SELECT * FROM probes LIMIT 0").column_names
    got = {"probes": store.query_arrow(f"SELECT {', '.join(cols)} FROM probes ORDER BY agent_id, seq").to_pylist()}
    for tier in ("probes_1m", "probes_1h_rnic", "probes_1h_tor"):
        got[tier] = store.query_arrow(f"SELECT sum(probes) AS n FROM {tier}").to_pylist()
    return got


@pytest.mark.kafka
def test_the_store_writer_stores_the_same_rows_from_plain_and_dictionary_messages(kafka_bootstrap, topic_prefix,
                                                                                   tmp_path):
    """The same worker output sent with plain strings (as before), then with dictionary-encoded strings mixed
    with plain ones (workers of both versions during an upgrade), through the store writer into chdb: every
    stored row of ``probes`` is the same, and each tier counts the same probes."""
    from fabricscope.kafka_admin import create_topics, delete_topics
    from sinks.clickhouse import ChdbStore, migrate
    from sinks.kafka_sink import StoreWriter

    steps = _steps(3)
    plain, mixed, n = [], [], 0
    for out in steps:
        wire = dictionary_tables([(m.enriched, m.stored) for m in out.messages], out.encoded)
        for m, w in zip(out.messages, wire, strict=True):
            assert m.minute is not None and m.stored is not None and w is not None
            part = m.source.partition
            for dest, stored in ((plain, m.stored), (mixed, w if n % 3 else m.stored)):
                dest.append((part, "probe_minute.v1", encode(m.minute)))
                dest.append((part, ENRICHED, encode(stored)))
            n += 1
    rows = sum(m.stored.num_rows for out in steps for m in out.messages if m.stored is not None)
    second = f"t{uuid.uuid4().hex[:8]}."
    create_topics(kafka_bootstrap, second)
    store = ChdbStore(tmp_path / "ch")
    migrate(store)
    try:
        snapshots = []
        for prefix, msgs in ((topic_prefix, plain), (second, mixed)):
            p = Producer({"bootstrap.servers": kafka_bootstrap})
            for part, schema, payload in msgs:
                p.produce(f"{prefix}probes.enriched", payload, partition=part, headers=headers_for(schema))
            assert p.flush(30) == 0
            w = StoreWriter(store, kafka_bootstrap, prefix, block_rows=10**9, block_s=3600.0)
            deadline = time.time() + 90
            while store.query_arrow("SELECT count() AS n FROM probes")["n"][0].as_py() < rows:
                assert time.time() < deadline, "the writer did not store every row"
                w.poll_once(timeout=1.0, force=True)
            w.close()
            assert w.stats.undecodable == 0
            snapshots.append(_rows_stored(store))
            for table in snapshots[-1]:
                store.command(f"TRUNCATE TABLE {table}")
        assert len(snapshots[0]["probes"]) == rows
        for table in snapshots[0]:
            assert snapshots[1][table] == snapshots[0][table], table
    finally:
        store.close()
        delete_topics(kafka_bootstrap, second)
