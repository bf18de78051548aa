"""Faust wiring of Hostping, registered on the app by :mod:`streams.runtime.app` (:func:`register`).

    hosts.topology (compacted) ──(mirror, from the start)──────┐
    hostmetrics.raw (bus_util rows) ──(mirror, last 10 min)────┤
    loopback.raw ──hostlink (one owner: 1 partition)───────────┴──▶ host_links ──▶ (sink) `host_links`
                                                                └──▶ verdicts   ──▶ (sink) `verdicts`
                                                                └──▶ deadletter (hosts with no topology)

The analytics are :class:`streams.hostping.hostping_stream.HostpingStream`; this file is plumbing only.
``RuntimeConfig.hostping_impact`` (``FABRICSCOPE_HOSTPING_IMPACT``, default P2) sets the impact class of
Hostping verdicts; ``hostping_bus_lookback_s`` (``FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S``, default 600) how far
back a starting worker reads bus readings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import faust

from schemas import topics as T
from schemas.codec import CodecError, decode, encode, headers_for, schema_key_from_headers
from schemas.deadletter import whole_message
from schemas.recent_mirror import RecentTopicMirror
from schemas.topic_mirror import TopicMirror
from streams.hostping.hostping_stream import HostpingStream
from streams.runtime.config import RuntimeConfig

log = logging.getLogger("fabricscope.hostping")


class _HostpingState:
    """The worker's Hostping state and its side readers, built on first use."""

    def __init__(self, config: RuntimeConfig, security: Mapping[str, str]) -> None:
        self.config = config
        self.security = dict(security)
        self.state: HostpingStream | None = None
        self.mirrors: list[TopicMirror] = []

    def get(self) -> tuple[HostpingStream, list[TopicMirror]]:
        if self.state is None:
            cfg, sec = self.config, self.security
            self.state = state = HostpingStream(impact=cfg.hostping_impact)
            self.mirrors.extend([
                TopicMirror(cfg.bootstrap, T.topic_name(T.HOSTS_TOPOLOGY, cfg.topic_prefix), state.on_topology, sec),
                RecentTopicMirror(cfg.bootstrap, T.topic_name(T.HOSTMETRICS_RAW, cfg.topic_prefix),
                                  state.on_hostmetrics, sec, cfg.hostping_bus_lookback_s),
            ])
        return self.state, self.mirrors


def register(
    app: faust.App,
    topic: Callable[[T.Topic], faust.TopicT],
    *,
    deadletter: faust.TopicT,
    verdicts: faust.TopicT,
    config: RuntimeConfig,
    security: Mapping[str, str],
) -> None:
    """Declare the Hostping topics and the ``hostlink`` agent on ``app``.

    ``topic`` turns a :class:`schemas.topics.Topic` into the app's topic (with the prefix);
    ``deadletter`` and ``verdicts`` are the app's own topics, shared with R-Pingmesh.
    """
    loopback_raw = topic(T.LOOPBACK_RAW)
    host_links = topic(T.HOST_LINKS)
    hostping = _HostpingState(config, security)

    @app.agent(loopback_raw, name=f"{__name__}.hostlink")
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
                                      value=encode(whole_message(msg.topic, msg.partition, msg.offset, schema,
                                                                 str(err), event.value or b"")))
                continue
            state, mirrors = hostping.get()
            for mirror in mirrors:  # every topology and bus reading published before this batch
                await loop.run_in_executor(None, mirror.catch_up)
            res = state.process(table)
            if res.host_links is not None:
                await host_links.send(key=event.key, value=encode(res.host_links),
                                      headers=headers_for("host_link.v1"))
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
