"""Faust wiring of Hostping (imported at the end of :mod:`streams.runtime.app`).

    hosts.topology (compacted) ──(mirror, from the start)──────┐
    hostmetrics.raw (bus_util rows) ──(mirror, last 10 min)────┤
    loopback.raw ──hostlink (one owner: 1 partition)───────────┴──▶ host_links ──▶ (sink) `host_links`
                                                                └──▶ verdicts   ──▶ (sink) `verdicts`
                                                                └──▶ deadletter (hosts with no topology)

The analytics are :class:`streams.hostping.hostping_stream.HostpingStream`; this file is plumbing only.
``FABRICSCOPE_HOSTPING_IMPACT`` (default P2) sets the impact class of Hostping verdicts;
``FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S`` (default 600) how far back a starting worker reads bus readings.
"""

from __future__ import annotations

import asyncio
import logging
import os

import faust

from schemas import topics as T
from schemas.codec import CodecError, decode, encode, headers_for, schema_key_from_headers
from streams.hostping.hostping_stream import HostpingStream
from streams.runtime.app import BOOTSTRAP, PREFIX, _security, _topic, app, deadletter, verdicts
from streams.runtime.deadletter import whole_message
from streams.runtime.recent_mirror import RecentTopicMirror
from streams.runtime.topic_mirror import TopicMirror

log = logging.getLogger("fabricscope.hostping")

loopback_raw = _topic(T.LOOPBACK_RAW)
host_links = _topic(T.HOST_LINKS)

_state: HostpingStream | None = None
_mirrors: list[TopicMirror] = []


def _hostping() -> tuple[HostpingStream, list[TopicMirror]]:
    """The worker's Hostping state and its side readers, built on first use."""
    global _state
    if _state is None:
        _state = HostpingStream(impact=os.environ.get("FABRICSCOPE_HOSTPING_IMPACT", "P2"))
        sec = _security()
        _mirrors.extend([
            TopicMirror(BOOTSTRAP, T.topic_name(T.HOSTS_TOPOLOGY, PREFIX), _state.on_topology, sec),
            RecentTopicMirror(BOOTSTRAP, T.topic_name(T.HOSTMETRICS_RAW, PREFIX), _state.on_hostmetrics, sec,
                              float(os.environ.get("FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S", "600"))),
        ])
    return _state, _mirrors


@app.agent(loopback_raw)
async def hostlink(stream: faust.StreamT) -> None:
    """One Algorithm 1 round per host and batch (Hostping §4.2-4.4); emit link states and named patterns."""
    loop = asyncio.get_running_loop()
    async for event in stream.events():
        msg = event.message
        schema = schema_key_from_headers(dict(event.headers or {})) or ""
        try:
            _, table = decode(event.value, schema or None)
        except CodecError as err:
            await deadletter.send(key=msg.topic.encode(), headers=headers_for("deadletter.v1"),
                                  value=encode(whole_message(msg.topic, msg.partition, msg.offset, schema, str(err),
                                                             event.value or b"")))
            continue
        state, mirrors = _hostping()
        for mirror in mirrors:  # every topology and bus reading published before this batch
            await loop.run_in_executor(None, mirror.catch_up)
        res = state.process(table)
        if res.host_links is not None:
            await host_links.send(key=event.key, value=encode(res.host_links), headers=headers_for("host_link.v1"))
        if res.verdicts is not None:
            for v in res.verdicts.select(["kind", "location"]).to_pylist():  # a few per host and round
                log.warning("hostping verdict %s at %s", v["kind"], v["location"])
            await verdicts.send(key=b"hostping", value=encode(res.verdicts), headers=headers_for("verdict.v1"))
        if res.skipped:  # one dead letter per message (the sink dedups on the source coordinates)
            reason = "; ".join(res.skipped[h] for h in sorted(res.skipped))
            log.error("%s", reason)
            await deadletter.send(key=msg.topic.encode(), headers=headers_for("deadletter.v1"),
                                  value=encode(whole_message(msg.topic, msg.partition, msg.offset, schema,
                                                             reason, event.value or b"")))
