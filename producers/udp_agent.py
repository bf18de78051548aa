"""The host agent of the ``udp`` backend: ``python -m producers.udp_agent --config FILE``.

It runs R-Pingmesh's agent loop (§3, §4) over :class:`producers.udp_prober.UdpEngine`:
probes its pinglist entries at their pinglist's rate, answers probes as responder,
traces every probed 5-tuple (and re-traces failing ones), and every 5 s uploads
one ``probe.v1`` batch (empty batches too: the heartbeat behind the analyzer's
host-down rule) plus any ``path.v1`` rows, built with nanoarrow (never pyarrow).

The process lives in the root network namespace and opens its probe sockets in
the host namespace named by ``netns`` (sockets keep the namespace they were made
in), so its Kafka connection reaches a broker on the root namespace's 127.0.0.1.

Config (JSON)::

    {"agent_id": "H1", "host": "H1", "netns": "fs-H1", "role": "both",
     "rnics": [{"name": "A1", "ip": "10.1.1.2", "netdev": "A1", "tor": "A"}],
     "dst_port": 4791, "allowed_sources": ["10.1.2.2", ...],
     "address_names": {"10.1.1.1": "A", ...},
     "pinglist_file": "var/lab/pinglists/H1.json",      # {"entries": [probe.v1-shaped dicts],
                                                        #  "reverse_peers": [probers of this host]}
     "pinglist_topic": false,          # true: this host's list from the controller's pinglists topic
     "max_probe_pps": 5000,            # a list from the topic over this many probes/s in all is refused
     "registry_dir": "var/lab/registry", "registry_refresh_s": 30,
     "rates": {"tor_mesh": 10, "inter_tor": 10, "service": 10},   # probes/s per RNIC
     "upload_interval_s": 5, "trace_interval_s": 60, "reverse_trace_interval_s": 20,
     "send_batch_ms": 25,              # probes due within 25 ms of the earliest leave with it (one wakeup)
     "reverse_trace_peers": [],        # more addresses whose ACK paths to trace (the agent's own targets always)
     "output": {"kind": "kafka", "bootstrap": "127.0.0.1:9092", "topic_prefix": ""}}

With ``pinglist_topic`` the agent follows the controller's compacted ``pinglists`` topic on the output's
broker (:mod:`producers.pinglist_feed`): the newest list keyed by its host replaces the one in force, so the
closed loop's split probes (``fabricscope pinglist loop``) reach it within a second of their publication. A
file named too is read at start and whenever it changes: the newer of the two lists is in force. A list from
the topic is taken only within bounds (entries, ``max_probe_pps``, destinations among ``allowed_sources``).
Entries of bounced probes (``bounce_path``) are refused, from either source, and counted: the udp backend
sends no IP-in-IP, so such a probe would never climb the switches it names.

``role`` is ``prober``, ``responder`` or ``both``; ``output.kind`` is ``kafka``,
``dir`` (``{"kind": "dir", "path": ...}``: one ``.arrow`` file per batch) or ``none``.
The responder writes ``<registry_dir>/<host>.json`` with its QPN at start (the
lab's registry; a restarted agent has a new QPN, R-Pingmesh's stale-QPN case).
The responder never answers an address with more than twice the bytes it received from it
over 10 s (:class:`producers.probe_protocol.ReplyBudget`), and traces the ACK paths (reverse
traces) only toward peers this host probes itself or ``reverse_trace_peers`` names: a new flow's
within ``REVERSE_ROUND_S`` of its first answer, each flow once per reverse trace interval, at most 8
flows per peer and reverse trace interval. A timeout re-traces its tuple (``RETRACE_FAILED_S``) and
starts a wave on its RNIC (``RETRACE_AFTER_TIMEOUT_S``).
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from producers import udp_prober
from producers.heap import fix_malloc_thresholds
from producers.probe_protocol import FinishedProbes, PendingProbe
from producers.udp_prober import DEFAULT_DST_PORT, TRACE_INTERVAL_S, LocalRnic, UdpEngine
from schemas.arrow_nano import encode_columns
from schemas.records import PATH_V1, PROBE_V1, REGISTRY_V1

if TYPE_CHECKING:
    from producers.pinglist_feed import PinglistFeed

log = logging.getLogger("fabricscope.agent")

# R-Pingmesh §4: ToR-mesh 10 probes/s per RNIC; >10 probes/s per link above the ToR;
# Service Tracing every 10 ms (we default lower: 2 shared CPUs run the whole lab).
DEFAULT_RATES = {"tor_mesh": 10.0, "inter_tor": 10.0, "service": 10.0}
UPLOAD_INTERVAL_S = 5.0
REVERSE_ROUND_S = 2.0  # the responder traces the ACK paths of new flows this often (each once per reverse interval)
RETRACE_FAILED_S = 5.0
# A timeout may mean the fabric moved flows (a link went down and its switch rehashed what crossed it): the
# RNIC's other 5-tuples traced before it are traced again at their next probe, not up to a trace interval later,
# so their passing probes stop counting on links they left. One such wave per RNIC per analysis window.
RETRACE_AFTER_TIMEOUT_S = 20.0
# The ACK paths change with the same rehash, and the responder sees no timeout of its own: it traces each flow's
# ACK path once per analysis window, so a stale one lasts one window, not three.
REVERSE_TRACE_INTERVAL_S = 20.0
# Probes due within this much of the earliest are sent with it, so the loop wakes once per batch of probes
# (30 at 8 RNICs x 150/s) instead of once per probe; a probe leaves at most this early, which no 20 s window
# or 500 ms timeout can tell. Replies are still read as they come (t6 stays the moment ACK1 is seen). 25 ms
# rather than 10: 0.85x the agent's CPU in paired runs (fewer send rounds, and their replies come together).
SEND_BATCH_MS = 25.0

# (schema key, Arrow IPC bytes, message key, extra Kafka headers)
Sink = Callable[[str, bytes, str, list[tuple[str, bytes]]], None]


def gid_of(ip: str) -> str:
    """RoCEv2 GID of an IPv4 address: IPv4-mapped IPv6 (``::ffff:a.b.c.d``), as in ``schemas.inventory``.

    Kept here so the agent does not import the inventory module (and PyYAML).
    """
    return f"::ffff:{ip}" if ":" not in ip else ip


def make_sink(output: dict[str, Any]) -> tuple[Sink, Callable[[], None]]:
    """A batch sink for ``output`` (see the module doc) and its flush function."""
    kind = output.get("kind", "none")
    if kind == "kafka":
        from producers.kafka_producer import AgentProducer
        from schemas.topics import PATHS_TRACED, PROBES_RAW, REGISTRY, topic_name

        prefix = output.get("topic_prefix", "")
        topics = {t.schema: topic_name(t, prefix) for t in (PROBES_RAW, PATHS_TRACED, REGISTRY)}
        producer = AgentProducer(
            output.get("bootstrap") or os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            kafka_config=output.get("kafka_config"),
        )

        def send(schema: str, payload: bytes, key: str, headers: list[tuple[str, bytes]]) -> None:
            producer.publish(topics[schema], payload, schema, key, headers=headers)

        return send, lambda: None if producer.flush(5.0) == 0 else log.warning("batches left unsent")
    if kind == "dir":
        root = Path(output["path"])

        def write(schema: str, payload: bytes, key: str, headers: list[tuple[str, bytes]]) -> None:
            d = root / schema
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{time.time_ns()}.tmp"
            tmp.write_bytes(payload)
            tmp.replace(d / f"{time.time_ns()}-{key}.arrow")

        return write, lambda: None
    if kind == "none":
        return (lambda schema, payload, key, headers: None), lambda: None
    raise ValueError(f"agent config: output.kind {kind!r} is not one of kafka, dir, none")


def columns(rows: list[dict[str, Any]], names: list[str]) -> dict[str, list[Any]]:
    """Row dicts -> column lists in ``names`` order (what :func:`encode_columns` takes)."""
    return {n: [r.get(n) for r in rows] for n in names}


class Agent:
    """One host's udp agent: schedule, engine, uploads. See the module doc for ``config``."""

    def __init__(self, config: dict[str, Any], sink: Sink | None = None, flush: Callable[[], None] | None = None):
        self.cfg = config
        self.agent_id = config.get("agent_id") or config["host"]
        self.host = config["host"]
        self.role = config.get("role", "both")
        if self.role not in ("both", "prober", "responder"):
            raise ValueError(f"agent config: role {self.role!r} is not one of both, prober, responder")
        self.rnics = [LocalRnic(r["name"], r["ip"], r.get("netdev", ""), r.get("tor", "")) for r in config["rnics"]]
        if sink is None:
            sink, flush = make_sink(config.get("output", {"kind": "none"}))
        self.sink = sink
        self.flush = flush or (lambda: None)
        self.probe_rows: list[dict[str, Any]] = []  # rows of the verbs engine
        self._finished = FinishedProbes()  # probes of the udp engine, compact until the upload builds columns
        self.path_rows: list[dict[str, Any]] = []
        self.backend = config.get("backend", "udp")
        if self.backend not in ("udp", "verbs"):
            raise ValueError(f"agent config: backend {self.backend!r} is not one of udp, verbs")
        self.tracing = self.backend == "udp"
        if self.backend == "verbs":
            from producers.verbs_prober import VerbsEngine

            self.engine: Any = VerbsEngine(
                self.agent_id,
                self.host,
                config["rnics"],
                allowed_gids={gid_of(ip) for ip in config.get("allowed_sources", [])},
                rate_limit=float(config.get("rate_limit", 500.0)),
                on_probe=self._on_probe,
            )
        else:
            self.engine = UdpEngine(
                self.agent_id,
                self.host,
                self.rnics,
                netns=config.get("netns"),
                qpns=config.get("qpns"),
                allowed_sources=config.get("allowed_sources", []),
                reverse_peers=config.get("reverse_trace_peers", []),
                responder=self.role in ("both", "responder"),
                dst_port=int(config.get("dst_port", DEFAULT_DST_PORT)),
                hardware=bool(config.get("hardware_timestamps", False)),
                rate_limit=float(config.get("rate_limit", 500.0)),
                address_names=config.get("address_names", {}),
                on_path=self._on_path,
                on_finished=self._on_finished,
            )
        self.rates = {**DEFAULT_RATES, **config.get("rates", {})}
        batch = config.get("send_batch_ms", SEND_BATCH_MS)
        if isinstance(batch, bool) or not isinstance(batch, (int, float)) or not 0 <= batch <= 1000:
            raise ValueError(f"agent config: send_batch_ms {batch!r} is not a number of ms in 0..1000")
        self.send_batch_ns = int(batch * 1e6)
        self.entries: list[dict[str, Any]] = []
        self._schedule: list[tuple[int, int]] = []
        self._pinglist_mtime = 0.0
        self._registry_qpn: dict[str, int] = {}
        self._controller_peers: set[str] = set()
        self._traced: dict[tuple[str, int, str, int], int] = {}
        # prober RNIC -> monotonic ns of its latest timeout that started a retrace wave (RETRACE_AFTER_TIMEOUT_S)
        self._retrace_since: dict[str, int] = {}
        self._stop = False
        self.rng = random.Random(config.get("seed"))
        self.refused_bounces = 0  # bounced entries of the lists set (the udp backend cannot send them)
        self.feed = self._feed(config) if config.get("pinglist_topic") else None

    def _feed(self, config: dict[str, Any]) -> PinglistFeed:
        from producers.pinglist_feed import MAX_PPS, PinglistFeed  # only agents that follow the topic load it

        output = config.get("output", {})
        if output.get("kind") != "kafka":
            raise ValueError("agent config: pinglist_topic needs output.kind kafka (the topic is on its broker)")
        known = frozenset(config.get("allowed_sources", []))
        return PinglistFeed(output.get("bootstrap") or os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                            output.get("topic_prefix", ""), self.host, kafka_config=output.get("kafka_config"),
                            max_pps=float(config.get("max_probe_pps", MAX_PPS)),
                            known_ips=known | {r.ip for r in self.rnics} if known else frozenset())

    # ---- pinglist and registry ---------------------------------------------------

    def set_entries(self, entries: list[dict[str, Any]]) -> None:
        """Replace the pinglist.

        An entry with ``rate_pps`` runs at that rate (probes/s); the others of one
        (prober RNIC, pinglist) group share the pinglist's rate from ``rates``.
        """
        mine = {r.name for r in self.rnics}
        if hasattr(self.engine, "forget_entries"):
            self.engine.forget_entries()
        mine_all = [dict(e) for e in entries if e.get("prober_rnic") in mine]
        self.entries = [e for e in mine_all if not e.get("bounce_path")]
        bounced = [e for e in mine_all if e.get("bounce_path")]
        if bounced:
            self.refused_bounces += len(bounced)
            log.warning("%s: %d bounced entries not probed (%s...): the agent sends no IP-in-IP (udp or verbs), "
                        "so they would not climb the switches they name", self.agent_id, len(bounced),
                        bounced[0]["bounce_path"])
        groups: dict[tuple[str, str], int] = {}
        for e in self.entries:
            k = (e["prober_rnic"], e.get("pinglist", "tor_mesh"))
            groups[k] = groups.get(k, 0) + 1
        now = time.monotonic_ns()
        self._schedule = []
        for i, e in enumerate(self.entries):
            if e.get("rate_pps"):  # the controller's per-entry rate (producers.controller)
                e["_interval_ns"] = int(1e9 / float(e["rate_pps"]))
            else:  # the pinglist's rate per RNIC, shared by the RNIC's entries
                rate = self.rates.get(e.get("pinglist", "tor_mesh"), 10.0)
                e["_interval_ns"] = int(1e9 * groups[(e["prober_rnic"], e.get("pinglist", "tor_mesh"))] / rate)
            self._schedule.append((now + int(self.rng.random() * e["_interval_ns"]), i))
            # the 5-tuple its traces are kept under (run_due); an ephemeral source port's once its socket is open
            e["_trace_key"] = (self.engine.rnics[e["prober_rnic"]].ip, int(e["src_port"]), e["dst_ip"],
                               int(e.get("dst_port") or self.engine.dst_port)) if e.get("src_port") else None
        heapq.heapify(self._schedule)
        self._apply_registry()
        if self.tracing:  # reverse traces only toward peers this agent probes, or that the config names
            extra = set(self.cfg.get("reverse_trace_peers", [])) | self._controller_peers
            self.engine.reverse_peers = {e["dst_ip"] for e in self.entries} | extra

    def _reload_pinglist(self) -> None:
        path = self.cfg.get("pinglist_file")
        if not path:
            return
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return
        if mtime == self._pinglist_mtime:
            return
        self._pinglist_mtime = mtime
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict):  # the controller may name the probers whose ACK paths this host traces
            self._controller_peers = set(data.get("reverse_peers", []))
        self.set_entries(data["entries"] if isinstance(data, dict) else data)
        log.info("%s: %d pinglist entries from %s", self.agent_id, len(self.entries), path)

    def _follow_topic(self) -> None:
        """Take the newest list the pinglists topic holds for this host, when one came (:attr:`feed`)."""
        if self.feed is None:
            return
        entries = self.feed.poll()
        if entries is not None:
            self.set_entries(entries)
            log.info("%s: %d pinglist entries from topic %s", self.agent_id, len(self.entries), self.feed.topic)

    def _reload_registry(self) -> None:
        d = self.cfg.get("registry_dir")
        if not d or not Path(d).is_dir():
            return
        qpns: dict[str, int] = {}
        for f in Path(d).glob("*.json"):
            try:
                reg = json.loads(f.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            for r in reg.get("rnics", []):
                qpns[r["rnic"]] = int(r["qpn"])
        self._registry_qpn = qpns
        self._apply_registry()

    def _apply_registry(self) -> None:
        for e in self.entries:
            q = self._registry_qpn.get(e.get("responder_rnic", ""))
            if q is not None:
                e["qpn"] = q

    def write_registration(self) -> None:
        """Responder: publish this host's RNICs with the current QPN (registry file and topic)."""
        now = time.time_ns()
        regs = [
            {
                "host": self.host,
                "rnic": r.name,
                "tor": r.tor,
                "ip": r.ip,
                "gid": gid_of(r.ip),
                "gid_index": 3,
                "qpn": self.engine.qpns[r.name],
            }
            for r in self.rnics
        ]
        d = self.cfg.get("registry_dir")
        if d:
            Path(d).mkdir(parents=True, exist_ok=True)
            tmp = Path(d) / f".{self.host}.tmp"
            tmp.write_text(
                json.dumps(
                    {"host": self.host, "qpns": self.engine.qpns, "pid": os.getpid(), "start_ns": now, "rnics": regs}
                )
            )
            tmp.replace(Path(d) / f"{self.host}.json")
        rows = [dict(r, agent_id=self.agent_id, upload_ns=now) for r in regs]
        self.sink(REGISTRY_V1.key, encode_columns(REGISTRY_V1.key, columns(rows, REGISTRY_V1.names)), self.host, [])

    # ---- probing, tracing, uploading ---------------------------------------------

    def _on_probe(self, row: dict[str, Any]) -> None:
        self.probe_rows.append(row)
        if row["status"] == "timeout" and self.tracing:
            self._on_timeout(row, (row["src_ip"], row["src_port"], row["dst_ip"], row["dst_port"]))

    def _on_finished(self, probes: list[PendingProbe]) -> None:
        self._finished.add_many(probes)
        if self.tracing:
            for p in probes:
                if p.t5 is None or p.t3 is None or p.t4 is None:  # a timeout (see probe_columns)
                    e = p.entry
                    self._on_timeout(e, (e["src_ip"], e["src_port"], e["dst_ip"], e["dst_port"]))

    def _on_timeout(self, e: dict[str, Any], key: tuple[str, int, str, int]) -> None:
        now = time.monotonic_ns()
        if now - self._traced.get(key, 0) > RETRACE_FAILED_S * 1e9:
            self._trace_entry(e)  # a rehash can move a failing tuple: trace it again
        rnic = e["prober_rnic"]
        if now - self._retrace_since.get(rnic, -(2**62)) > RETRACE_AFTER_TIMEOUT_S * 1e9:
            self._retrace_since[rnic] = now  # the RNIC's tuples traced before now: again at their next probe

    def _on_path(self, row: dict[str, Any]) -> None:
        # Looked up at each call: upload() swaps in a fresh list, and a bound ``append`` of the first
        # list would keep filling one that is never uploaded again.
        self.path_rows.append(row)

    def _trace_entry(self, e: dict[str, Any]) -> None:
        _, _, ep, dst, _, _ = self.engine.resolve(e)  # the socket its probes leave from (an ephemeral port's too)
        self._traced[(ep.ip, ep.port, dst[0], dst[1])] = time.monotonic_ns()
        self.engine.trace(ep, dst, e.get("responder_rnic") or dst[0])

    def run_due(self, now: int, ahead_ns: int = 0) -> None:
        """When the earliest probe's time has come, send it and every probe due within ``ahead_ns`` of ``now``
        (one batch; nothing before then); trace 5-tuples not traced for ``trace_interval_s`` or since their
        RNIC's latest retrace wave (``RETRACE_AFTER_TIMEOUT_S``)."""
        schedule, entries = self._schedule, self.entries
        if not schedule or schedule[0][0] > now:
            # a batch leaves when its earliest probe is due; the wakeups replies cause in between send nothing,
            # or every wakeup would send a small batch and the replies come back spread over many more
            return
        trace_ns = float(self.cfg.get("trace_interval_s", TRACE_INTERVAL_S)) * 1e9
        horizon = now + ahead_ns
        batch = []
        while schedule and schedule[0][0] <= horizon:
            due, i = schedule[0]
            e = entries[i]
            batch.append(e)
            nxt = due + e["_interval_ns"]
            heapq.heapreplace(schedule, (nxt if nxt > now else now + e["_interval_ns"], i))  # one sift, not two
        if batch:
            self.engine.send_probes(batch)
        if not self.tracing:
            return
        traced, since = self._traced, self._retrace_since
        for e in batch:
            key = e["_trace_key"]
            if key is None:  # an ephemeral source port: known once its socket is open, then kept
                _, _, ep, dst, _, _ = self.engine.resolve(e)
                key = e["_trace_key"] = (ep.ip, ep.port, dst[0], dst[1])
            last = traced.get(key, -(2**62))
            if now - last > trace_ns or last < since.get(e["prober_rnic"], -(2**62)):
                self._trace_entry(e)

    def upload(self) -> None:
        """Upload the probe rows (always: the heartbeat) and path rows gathered since the last upload."""
        now = time.time_ns()
        # The upload marks travel as headers too, so an empty batch is still a heartbeat (host-down rule).
        marks = [("agent_id", self.agent_id.encode()), ("upload_ns", str(now).encode()), ("host", self.host.encode())]
        if self.role != "responder":
            rows, self.probe_rows = self.probe_rows, []
            done, self._finished = self._finished, FinishedProbes()
            cols = done.columns(self.agent_id, self.host)
            if rows:
                more = columns(rows, PROBE_V1.names)
                cols = {n: list(cols.get(n, [])) + more[n] for n in PROBE_V1.names}
            cols["upload_ns"] = [now] * (len(done) + len(rows))
            cols = {n: cols[n] for n in PROBE_V1.names}
            self.sink(PROBE_V1.key, encode_columns(PROBE_V1.key, cols), self.agent_id, marks)
        if self.path_rows:
            rows, self.path_rows = self.path_rows, []
            for r in rows:
                r["upload_ns"] = now
            self.sink(PATH_V1.key, encode_columns(PATH_V1.key, columns(rows, PATH_V1.names)), self.agent_id, marks)

    def stop(self, *_: object) -> None:
        self._stop = True

    def run(self, duration_s: float | None = None) -> None:
        """The agent loop, until SIGTERM/SIGINT or ``duration_s`` seconds."""
        upload_ns = int(float(self.cfg.get("upload_interval_s", UPLOAD_INTERVAL_S)) * 1e9)
        registry_ns = int(float(self.cfg.get("registry_refresh_s", 30)) * 1e9)
        reverse_trace_ns = int(float(self.cfg.get("reverse_trace_interval_s", REVERSE_TRACE_INTERVAL_S)) * 1e9)
        reverse_ns = int(REVERSE_ROUND_S * 1e9)
        start = time.monotonic_ns()
        end = start + int(duration_s * 1e9) if duration_s else None
        next_upload, next_registry, next_pinglist, next_reverse = start + upload_ns, start, start, start + reverse_ns
        reverse_since = start
        if self.role in ("both", "responder"):
            self.write_registration()
        while not self._stop and (end is None or time.monotonic_ns() < end):
            now = time.monotonic_ns()
            if self.role != "responder":
                if now >= next_pinglist:
                    self._reload_pinglist()
                    self._follow_topic()
                    self.engine.trim_sent()
                    next_pinglist = now + 1_000_000_000
                if now >= next_registry:
                    self._reload_registry()
                    next_registry = now + registry_ns
                self.run_due(now, self.send_batch_ns)
            elif self.tracing and now >= next_pinglist:  # the responder's reverse peers come from the pinglist
                self._reload_pinglist()
                self._follow_topic()
                next_pinglist = now + 1_000_000_000
            # responder (alone or with the prober): trace the ACK paths it answered, toward the host's probe targets
            if self.role != "prober" and self.tracing and now >= next_reverse:
                self.engine.trace_reverse_paths(reverse_since, reverse_trace_ns, now)
                reverse_since, next_reverse = now, now + reverse_ns
            if now >= next_upload:
                self.upload()
                next_upload += upload_ns
            wake = next_upload
            if self.role != "prober" and self.tracing:
                wake = min(wake, next_reverse)
            if self.role != "responder":
                wake = min([wake, next_pinglist] + ([self._schedule[0][0]] if self._schedule else []))
            self.engine.poll(max(0.0, min(0.05, (wake - time.monotonic_ns()) / 1e9)))
        # Let the probes in flight finish; those still pending were cut by the stop, not lost.
        drain_end = time.monotonic_ns() + 600_000_000
        while self.engine.pending and time.monotonic_ns() < drain_end:
            self.engine.poll(0.01)
        self.engine.pending.clear()
        self.upload()
        self.flush()
        self.engine.close()
        if self.feed is not None:
            self.feed.close()


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--config FILE`` [``--role``] [``--duration S``]."""
    ap = argparse.ArgumentParser(prog="python -m producers.udp_agent", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="agent config JSON (see the module doc)")
    ap.add_argument("--role", choices=("both", "prober", "responder"), help="override the config's role")
    ap.add_argument("--duration", type=float, help="stop after this many seconds")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = json.loads(Path(args.config).read_text())
    if args.role:
        cfg["role"] = args.role
    steady_heap = fix_malloc_thresholds()  # before the producer's threads and the first upload
    agent = Agent(cfg)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    log.info("agent %s (%s) up, QPNs %s, socket calls %s, malloc thresholds %s", agent.agent_id, agent.role,
             agent.engine.qpns, udp_prober.SOCKET_CALLS, "fixed" if steady_heap else "the C library's own")
    agent.run(args.duration)


if __name__ == "__main__":
    main()
