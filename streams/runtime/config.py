"""The stream runtime's configuration, handed in by whoever starts a worker.

The CLI (``fabricscope worker``) reads its validated settings and passes a
:class:`RuntimeConfig` to :func:`streams.runtime.worker.run_worker`, which builds the Faust app
from it (:func:`streams.runtime.app.build_app`); the runtime never reads the CLI's settings
module itself, and nothing in it reads a configuration when imported.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.probe_rows.retention import RetentionPolicy
from streams.pingmesh.impact import JobThreshold

ROLES = ("all", "stream", "reducer")
"""Worker roles: everything in one process; the probe path and Hostping; the window reducer alone."""


@dataclass(frozen=True)
class RuntimeConfig:
    """What a stream worker needs to know.

    Attributes:
        bootstrap: Kafka bootstrap servers, ``host:port[,...]``.
        topic_prefix: prefix of every topic name (and of the Faust app id).
        kafka_client: librdkafka security settings (``security.protocol``, ``sasl.*``,
            ``ssl.ca.location``); holds the SASL password, so never logged.
        var_dir: local state directory (Faust's data lives in ``<var_dir>/faust``).
        job_thresholds: job id -> the job's metric threshold (impact grading).
        partition_idle_s: seconds after which an idle partition stops holding the watermark.
        hostping_impact: impact class of Hostping verdicts (``P0``..``P3``).
        hostping_bus_lookback_s: how far back (s) a starting worker reads bus readings.
        retention: which raw probe rows the store keeps (the tiers count every probe).
        step_messages: probe messages per worker step at most ...
        step_s: ... or what arrived within this many seconds.
        acks: producer acks, ``"all"``, ``"1"`` or ``"0"`` (``KAFKA_ACKS``).
        idempotence: idempotent producers (``KAFKA_IDEMPOTENCE``; needs ``acks="all"``).
        replication: replicas of topics Faust creates itself; None = Faust's default of 1
            (``fabricscope worker`` passes min(3, brokers) or ``KAFKA_REPLICATION_FACTOR``).
        role: what this worker process runs (:data:`ROLES`): ``all`` (the probe path, Hostping and the
            reducer, one consumer group), ``stream`` (the probe path and Hostping only) or ``reducer``
            (the window reducer only, in a consumer group of its own: ``<prefix>fabricscope-reducer``).
            ``fabricscope up`` runs N ``stream`` workers and one ``reducer``, so no worker step holds the
            reducer's GIL or core while it closes a window.
    """

    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = ""
    kafka_client: Mapping[str, str] = field(default_factory=dict, repr=False)
    var_dir: str = "var"
    job_thresholds: Mapping[str, JobThreshold] = field(default_factory=dict)
    partition_idle_s: float = 30.0
    hostping_impact: str = "P2"
    hostping_bus_lookback_s: float = 600.0
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    step_messages: int = 64
    step_s: float = 0.5
    acks: str = "all"
    idempotence: bool = True
    replication: int | None = None
    role: str = "all"

    @property
    def stream_buffer_messages(self) -> int:
        """Messages a worker's stream may hold fetched but not yet stepped (Faust's ``stream_buffer_maxsize``):
        four steps. Faust's default, 4,096, let a worker catching up a backlog of the paper's 6,000-row uploads
        (~0.6 MB each) hold ~2.4 GB of them: 2.8-3.0 GiB peak RSS per worker at 4,096 RNICs, 1.3-1.4 GiB with
        256, at the same rows/s and CPU per row (BENCHMARKS.md §4, "A worker catching up a backlog")."""
        return 4 * self.step_messages

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"worker role {self.role!r}: expected one of {', '.join(ROLES)}")

    @classmethod
    def from_env(
        cls,
        bootstrap: str,
        topic_prefix: str,
        kafka_client: Mapping[str, str],
        var_dir: str,
        environ: Mapping[str, str] = os.environ,
    ) -> RuntimeConfig:
        """The configuration with the stream-only tunables read from ``environ``.

        ``FABRICSCOPE_JOB_THRESHOLDS`` (JSON ``{"job": {"value": 100.0, "higher_is_worse":
        false}}``), ``FABRICSCOPE_PARTITION_IDLE_S`` (default 30), ``FABRICSCOPE_HOSTPING_IMPACT``
        (default P2), ``FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S`` (default 600), the raw retention
        policy ``FABRICSCOPE_RAW_RETENTION`` (full | anomalies), ``FABRICSCOPE_RAW_SAMPLE`` (0.01)
        and ``FABRICSCOPE_RAW_SAMPLE_SEED`` (0), and the worker step ``FABRICSCOPE_STEP_MESSAGES``
        (64) and ``FABRICSCOPE_STEP_S`` (0.5).

        Raises:
            ValueError: a variable is not valid JSON or not a number (the message names it).
        """
        try:
            spec = json.loads(environ.get("FABRICSCOPE_JOB_THRESHOLDS", "{}"))
            thresholds = {
                name: JobThreshold(float(s["value"]), bool(s.get("higher_is_worse", False))) for name, s in spec.items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"FABRICSCOPE_JOB_THRESHOLDS: {e}; expected JSON like "
                '{"job": {"value": 100.0, "higher_is_worse": false}}'
            ) from None
        return cls(
            bootstrap=bootstrap,
            topic_prefix=topic_prefix,
            kafka_client=dict(kafka_client),
            var_dir=var_dir,
            job_thresholds=thresholds,
            partition_idle_s=_number(environ, "FABRICSCOPE_PARTITION_IDLE_S", "30"),
            hostping_impact=environ.get("FABRICSCOPE_HOSTPING_IMPACT", "P2"),
            hostping_bus_lookback_s=_number(environ, "FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S", "600"),
            retention=RetentionPolicy.from_environ(environ),
            step_messages=max(1, int(_number(environ, "FABRICSCOPE_STEP_MESSAGES", "64"))),
            step_s=_number(environ, "FABRICSCOPE_STEP_S", "0.5"),
        )


def _number(environ: Mapping[str, str], name: str, default: str) -> float:
    raw = environ.get(name, default)
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
