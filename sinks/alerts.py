"""The alert sink: consumes ``verdicts`` and pushes alerts to Prometheus Alertmanager (API v2).

Alertmanager does grouping, deduplication, repeats, resolves, silences and routing
(``infra/alertmanager/alertmanager.yml``: P0 at once, P1 grouped per window, P2 to a
digest). fabricscope adds what Alertmanager cannot know, hysteresis over analyzer
windows: a problem seen in one 20 s window fires at once, and resolves only after it
was absent from ``clear_windows`` consecutive windows, so a flapping problem stays one
alert instead of a fire/resolve flood (R-Pingmesh §5 grades problems per window).

Time is event time: the watermark is the newest ``window_end_ns`` seen on the topic,
so a replay gives the same fire/resolve decisions. While the topic is idle the wall
clock advances the watermark (live mode), or a quiet cluster would never resolve.

If Alertmanager is unreachable the offset is not committed and every firing alert is
re-pushed each ``resend_s``; a lost resolve still ends at the alert's ``endsAt`` (``hold_s``).

Only verdicts of the origins the sink is told to alert on are pushed (``FABRICSCOPE_ALERT_ORIGINS``;
default: the sink's own ``FABRICSCOPE_ORIGIN``, so a production sink never pages for a lab's or a
simulator's verdicts). A message's origin is its ``origin`` header (a demo sets ``demo``), else the sink's
own, as the store writer stamps it (:mod:`sinks.origin`). Probe noise (``stale_qpn``) raises no alert.

Alert labels: ``alertname=FabricProblem``, ``cluster``, ``origin``, ``kind``, ``location``,
``impact``, ``job`` (empty when no job). Receiver URLs live only in Alertmanager's
config; this module never sees them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from prometheus_client import Counter, Gauge

from schemas import topics as T
from schemas.codec import CodecError, decode, schema_key_from_headers
from sinks.origin import check as check_origin
from sinks.origin import from_headers as origin_from_headers

log = logging.getLogger("fabricscope.alerts")

ALERTNAME = "FabricProblem"
NOT_ALERTED = ("undetermined",)
"""Verdict kinds that page nobody: no claim was made."""
NOISE_IMPACT = "noise"
"""The impact the analyzer gives probe noise (a stale pinglist: stale_qpn); it pages nobody either."""

VERDICTS_IN = Counter("fabricscope_alert_verdicts_total", "verdict rows consumed by the alert sink")
VERDICTS_OTHER_ORIGIN = Counter("fabricscope_alert_verdicts_other_origin_total",
                                "verdict rows not alerted: their origin is not one the sink alerts on", ["origin"])
ALERTS_SENT = Counter("fabricscope_alerts_sent_total", "alerts pushed to Alertmanager", ["status"])
ALERTS_ACTIVE = Gauge("fabricscope_alerts_active", "problems firing after hysteresis")
PUSH_ERRORS = Counter("fabricscope_alert_push_errors_total", "failed pushes to Alertmanager")

Key = tuple[str, str, str, str, str]  # origin, kind, location, job, impact


@dataclass
class Problem:
    """One firing problem: its labels, when it started (event ns) and the last window that saw it."""

    labels: dict[str, str]
    starts_ns: int
    last_end_ns: int
    window_ns: int
    summary: str
    verdict_id: str


@dataclass
class Event:
    """A change to push: ``firing`` (new) or ``resolved``, with the problem it is about."""

    status: str
    problem: Problem


@dataclass
class Hysteresis:
    """Fire on the first window a problem is seen; resolve after ``clear_windows`` windows without it.

    Args:
        cluster: the ``cluster`` label of every alert.
        clear_windows: N, the windows a problem must be absent before it resolves (>= 1).
    """

    cluster: str
    clear_windows: int = 3
    active: dict[Key, Problem] = field(default_factory=dict)
    watermark_ns: int = 0

    def observe(self, rows: Iterable[dict], origin: str = "production") -> list[Event]:
        """Take verdict rows (``verdict.v1`` dicts) of ``origin``; return the problems that start firing now."""
        events = []
        for v in rows:
            if v["kind"] in NOT_ALERTED or v["impact"] == NOISE_IMPACT:
                continue
            job = v.get("job_id") or ""
            key: Key = (origin, v["kind"], v["location"], job, v["impact"])
            window_ns = max(1, v["window_end_ns"] - v["window_start_ns"])
            summary = (f"{v['kind']} at {v['location']}: {v['failed_probes']}/{v['total_probes']} probes failed, "
                       f"confidence {v['confidence']:.2f}")
            p = self.active.get(key)
            if p is None:
                labels = {"alertname": ALERTNAME, "cluster": self.cluster, "origin": origin, "kind": v["kind"],
                          "location": v["location"], "impact": v["impact"], "job": job}
                p = Problem(labels, v["window_start_ns"], v["window_end_ns"], window_ns, summary, v["verdict_id"])
                self.active[key] = p
                events.append(Event("firing", p))
            elif v["window_end_ns"] >= p.last_end_ns:
                p.last_end_ns, p.summary, p.verdict_id = v["window_end_ns"], summary, v["verdict_id"]
            self.watermark_ns = max(self.watermark_ns, v["window_end_ns"])
        ALERTS_ACTIVE.set(len(self.active))
        return events

    def advance(self, watermark_ns: int | None = None) -> list[Event]:
        """Move the watermark (event ns) forward; return the problems that resolve now."""
        if watermark_ns is not None:
            self.watermark_ns = max(self.watermark_ns, watermark_ns)
        gone = [k for k, p in self.active.items()
                if (self.watermark_ns - p.last_end_ns) // p.window_ns >= self.clear_windows]
        events = [Event("resolved", self.active.pop(k)) for k in gone]
        ALERTS_ACTIVE.set(len(self.active))
        return events


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat().replace("+00:00", "Z")


class AlertmanagerClient:
    """Pushes alerts to ``POST {url}/api/v2/alerts``.

    Args:
        url: Alertmanager's base URL, e.g. ``http://127.0.0.1:9193``.
        hold_s: a firing alert's ``endsAt`` lies this far ahead; the sink re-pushes well before.
    """

    def __init__(self, url: str, hold_s: float = 120.0, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.hold_s = hold_s
        self._http = httpx.Client(timeout=timeout)

    def body(self, events: Iterable[Event], now_ns: int) -> list[dict]:
        """The API v2 payload: firing alerts end ``hold_s`` ahead, resolved ones end now."""
        out = []
        for e in events:
            p = e.problem
            ends = now_ns + int(self.hold_s * 1e9) if e.status == "firing" else now_ns
            out.append({"labels": p.labels, "startsAt": _iso(min(p.starts_ns, now_ns)), "endsAt": _iso(ends),
                        "annotations": {"summary": p.summary, "verdict_id": p.verdict_id}})
        return out

    def push(self, events: list[Event]) -> bool:
        """Send ``events``; False (logged, counted) when Alertmanager did not take them."""
        if not events:
            return True
        try:
            r = self._http.post(f"{self.url}/api/v2/alerts", json=self.body(events, time.time_ns()))
            r.raise_for_status()
        except httpx.HTTPError as err:
            PUSH_ERRORS.inc()
            log.error("Alertmanager at %s did not take %d alerts: %s", self.url, len(events), type(err).__name__)
            return False
        for e in events:
            ALERTS_SENT.labels(e.status).inc()
        return True

    def close(self) -> None:
        self._http.close()


class AlertSink:
    """Consumes ``prefix`` + ``verdicts``, applies :class:`Hysteresis`, pushes to Alertmanager.

    Args:
        bootstrap: Kafka bootstrap servers.
        client: the Alertmanager client.
        hysteresis: the per-problem state.
        prefix: topic name prefix.
        resend_s: re-push every firing alert this often (Alertmanager expires alerts at ``endsAt``).
        idle_advance: advance the watermark with the wall clock while the topic is idle.
        kafka_config: extra client settings (SASL/TLS), never logged.
        origin: the origin of a verdict message without an ``origin`` header (the pipeline's own).
        alert_origins: the origins whose verdicts are alerted (default: ``origin`` only); verdicts of any
            other origin are read, counted (``fabricscope_alert_verdicts_other_origin_total``) and committed.

    Raises:
        sinks.origin.OriginError: ``origin`` or one of ``alert_origins`` is no origin.
    """

    def __init__(self, bootstrap: str, client: AlertmanagerClient, hysteresis: Hysteresis, prefix: str = "",
                 group: str = "fabricscope-alerts", resend_s: float = 30.0, idle_advance: bool = True,
                 kafka_config: dict[str, str] | None = None, origin: str = "production",
                 alert_origins: Iterable[str] | None = None) -> None:
        from confluent_kafka import Consumer

        self.origin = check_origin(origin)
        self.alert_origins = frozenset(check_origin(o) for o in (alert_origins or (origin,)))
        self._told: set[str] = set()  # the other origins already logged once
        self.client = client
        self.state = hysteresis
        self.resend_s = resend_s
        self.idle_advance = idle_advance
        conf = {"bootstrap.servers": bootstrap, "group.id": f"{prefix}{group}", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
        conf.update(kafka_config or {})
        self._consumer = Consumer(conf)
        self._consumer.subscribe([T.topic_name(T.VERDICTS, prefix)])
        self._last_msg = time.monotonic()
        self._last_resend = time.monotonic()

    def poll_once(self, timeout: float = 0.5) -> int:
        """Consume up to 100 verdict batches and push what changed; returns verdict rows read."""
        msgs = self._consumer.consume(num_messages=100, timeout=timeout)
        rows = 0
        for msg in msgs:
            if msg.error():
                continue
            try:
                _, table = decode(msg.value(), schema_key_from_headers(msg.headers()))
            except CodecError as err:
                log.error("undecodable verdict message %s/%d/%d: %s", msg.topic(), msg.partition(), msg.offset(), err)
                continue
            batch = table.to_pylist()
            rows += len(batch)
            VERDICTS_IN.inc(len(batch))
            origin = origin_from_headers(msg.headers(), self.origin)
            if origin not in self.alert_origins:  # another pipeline's (a lab, a simulator, a demo): not ours
                VERDICTS_OTHER_ORIGIN.labels(origin).inc(len(batch))
                if origin not in self._told:
                    self._told.add(origin)
                    log.info("verdicts of origin %s are not alerted (alerting on %s: FABRICSCOPE_ALERT_ORIGINS)",
                             origin, ", ".join(sorted(self.alert_origins)))
                self._consumer.commit(message=msg, asynchronous=False)
                continue
            events = self.state.observe(batch, origin) + self.state.advance()
            for e in events:
                log.info("%s %s", e.status, " ".join(f"{k}={v}" for k, v in e.problem.labels.items()))
            if self.client.push(events):
                self._consumer.commit(message=msg, asynchronous=False)
            self._last_msg = time.monotonic()
        now = time.monotonic()
        if self.idle_advance and not msgs and self.state.active:
            idle_ns = int((now - self._last_msg) * 1e9)
            step = min(p.window_ns for p in self.state.active.values())
            if idle_ns >= step:
                events = self.state.advance(self.state.watermark_ns + step)
                self._last_msg = now
                for e in events:
                    log.info("%s (idle) %s", e.status, " ".join(f"{k}={v}" for k, v in e.problem.labels.items()))
                self.client.push(events)
        if now - self._last_resend >= self.resend_s and self.state.active:
            self.client.push([Event("firing", p) for p in self.state.active.values()])
            self._last_resend = now
        return rows

    def run(self, stop: Callable[[], bool]) -> None:
        """Loop until ``stop()`` is true."""
        while not stop():
            self.poll_once()

    def close(self) -> None:
        self._consumer.close()
        self.client.close()
