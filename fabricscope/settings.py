"""Settings from the environment (or a ``.env`` file), validated by pydantic-settings.

Secrets (SASL password, ClickHouse URL with credentials, webhook URLs) are
``SecretStr``: they never appear in ``repr`` or logs. A typo in a variable's
value fails at start with the variable's name and the fix.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sinks.readonly_sql import QueryLimits

if TYPE_CHECKING:
    from sinks.query_endpoint import EndpointLimits

ENV_FILE = ".env"
Origin = Literal["production", "lab", "sim", "demo"]
"""Where verdicts come from (:data:`sinks.origin.ORIGINS`; not imported here: it loads pyarrow)."""
ORIGINS: tuple[str, ...] = get_args(Origin)


class ConfigError(ValueError):
    """A setting is wrong; the message names the variable (and the file), what is wrong and the fix."""


class Settings(BaseSettings):
    """fabricscope's configuration. Every field reads the environment variable of the same name, upper-case."""

    model_config = SettingsConfigDict(env_file=ENV_FILE, extra="ignore")

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers host:port[,...]")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="how every Kafka client connects: SASL (PLAIN/SCRAM) and TLS")
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism with SASL_PLAINTEXT or SASL_SSL")
    kafka_sasl_username: str | None = Field(None, description="SASL user")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password; never logged")
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle for TLS (SSL, SASL_SSL)")
    clickhouse_url: SecretStr | None = Field(None, description="http://user:pw@host:8123/db; unset = embedded chdb")
    fabricscope_var: Path = Field(Path("var"), description="local state: Kafka data, embedded store, lab state")
    fabricscope_topic_prefix: str = Field(
        "", description="prefix of every topic and consumer group: several pipelines on one broker")
    fabricscope_origin: Origin = Field(
        "production", description="origin the store writer stamps on verdicts and coverage (`up` sets it from its "
        "source); saved queries, blame and the live feed show the running writer's origin by default")
    fabricscope_alert_origins: str | None = Field(
        None, description="origins whose verdicts `fabricscope alerts` pushes to Alertmanager, comma-separated "
        "(production, lab, sim, demo) or all; unset = FABRICSCOPE_ORIGIN only, so a production sink never pages "
        "for a lab's or a simulator's verdicts (docs/alerts.md)")
    fabricscope_inventory: Path | None = Field(
        None, description="inventory YAML the store writer loads into rnic_inventory at start (ToR names)")
    # The store writer's blocks of probe rows and tiers (docs/storage.md, "Exactly-once rows"): only raw history and the
    # tiers wait for a block, verdicts do not. The default is sinks.blocks.BLOCK_ROWS (not imported: pyarrow),
    # which says why; tests/sinks/test_sink_blocks.py holds the two equal.
    fabricscope_sink_block_rows: int = Field(1_000_000, gt=0,
                                             description="rows per insert block (over all partitions read)")
    fabricscope_sink_block_s: float = Field(10.0, gt=0, description="seconds a block may wait for more rows")
    fabricscope_sink_block_min_rows: int | None = Field(
        None, ge=0, description="a block under this many rows at FABRICSCOPE_SINK_BLOCK_S waits on while rows still "
        "arrive (slow input); unset = a fifth of FABRICSCOPE_SINK_BLOCK_ROWS")
    fabricscope_sink_block_slow_max_s: float | None = Field(
        None, gt=0, description="the longest such a block waits; unset = 3 x FABRICSCOPE_SINK_BLOCK_S")
    # Limits of every user query (`fabricscope query`, saved queries, the sink's endpoint); past one
    # the query stops with the engine's error. Defaults: the documented queries take 0.1-1.3 s and
    # return at most ~81 k rows over a day of a 1,000-RNIC cluster (BENCHMARKS.md, "History tiers").
    fabricscope_query_max_execution_time_s: float = Field(60.0, gt=0, description="seconds per query")
    fabricscope_query_max_result_rows: int = Field(1_000_000, gt=0, description="rows per result")
    fabricscope_query_max_result_bytes: int = Field(256 * 1024 * 1024, gt=0, description="bytes per result")
    fabricscope_query_max_threads: int = Field(default_factory=lambda: max(1, (os.cpu_count() or 2) // 2), gt=0,
                                               description="threads per query: half the cores, the rest insert")
    # What user queries and the store writer's endpoint may cost it (docs/security.md): the writer is the
    # process that must never die, so every reader together stays under FABRICSCOPE_QUERY_MEMORY_TOTAL_BYTES.
    fabricscope_query_max_memory_bytes: int = Field(512 * 1024 * 1024, ge=16 * 1024 * 1024,
                                                    description="memory per query (max_memory_usage), bytes")
    fabricscope_query_readers: int = Field(3, ge=1, le=64, description="queries at once on the long lane; one "
                                           "more reader is kept for short queries, the rest are answered busy")
    fabricscope_query_short_s: float = Field(2.0, gt=0, description="time limit of the reader kept for short "
                                             "queries (used when the long lane is full)")
    fabricscope_query_memory_total_bytes: int = Field(
        2 * 1024 * 1024 * 1024, gt=0, description="what every reader together may take: (readers + 1) x memory "
        "per query must fit, below what the writer's inserts need")
    fabricscope_endpoint_max_connections: int = Field(64, ge=1, le=10_000,
                                                      description="connections open at once to the endpoint")
    fabricscope_endpoint_request_timeout_s: float = Field(10.0, gt=0, le=600,
                                                          description="seconds for a whole request to arrive")
    fabricscope_endpoint_idle_timeout_s: float = Field(5.0, gt=0, le=600,
                                                       description="longest gap while a request arrives, seconds")
    fabricscope_endpoint_max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                                     description="largest request body (Content-Length), bytes")
    # Durability on a replicated cluster (docs/clusters.md): unset = fit the cluster that answers.
    kafka_replication_factor: int | None = Field(
        None, ge=1, description="replicas of every topic, Faust's own too; unset = min(3, brokers)")
    kafka_min_insync_replicas: int | None = Field(
        None, ge=1, description="min.insync.replicas of every topic; unset = max(1, replication - 1)")
    kafka_acks: Literal["all", "1", "0"] = Field(
        "all", description="producer acks (agent, Faust workers); all = every in-sync replica has the batch")
    kafka_idempotence: bool = Field(True, description="idempotent producers (no duplicate on retry); needs acks=all")

    @field_validator("fabricscope_alert_origins")
    @classmethod
    def _known_origins(cls, v: str | None) -> str | None:
        if v is None or v.strip().lower() == "all":
            return v
        names = [o.strip() for o in v.split(",") if o.strip()]
        bad = [o for o in names if o not in ORIGINS]
        if bad or not names:
            raise ValueError(f"{v!r}: name origins from {', '.join(ORIGINS)}, comma-separated, or all")
        return ",".join(names)

    def alert_origins(self) -> tuple[str, ...]:
        """The origins whose verdicts the alert sink pushes (``FABRICSCOPE_ALERT_ORIGINS``, default: this
        pipeline's own ``FABRICSCOPE_ORIGIN``)."""
        v = self.fabricscope_alert_origins
        if v is None:
            return (self.fabricscope_origin,)
        return ORIGINS if v.strip().lower() == "all" else tuple(v.split(","))

    @model_validator(mode="after")
    def _idempotence_needs_acks_all(self) -> Settings:
        if self.kafka_idempotence and self.kafka_acks != "all":
            raise ValueError(f"KAFKA_IDEMPOTENCE=true needs KAFKA_ACKS=all (got {self.kafka_acks}); "
                             "set KAFKA_IDEMPOTENCE=false to use weaker acks")
        return self

    @model_validator(mode="after")
    def _readers_fit_the_memory_total(self) -> Settings:
        need = (self.fabricscope_query_readers + 1) * self.fabricscope_query_max_memory_bytes
        if need > self.fabricscope_query_memory_total_bytes:
            raise ValueError(
                f"FABRICSCOPE_QUERY_READERS={self.fabricscope_query_readers} (+1 short-query reader) x "
                f"FABRICSCOPE_QUERY_MAX_MEMORY_BYTES={self.fabricscope_query_max_memory_bytes} = {need} bytes is over "
                f"FABRICSCOPE_QUERY_MEMORY_TOTAL_BYTES={self.fabricscope_query_memory_total_bytes}; lower one of the "
                "first two or raise the total")
        return self

    @property
    def store_path(self) -> Path:
        """The embedded store's directory."""
        return self.fabricscope_var / "clickhouse"

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka security settings (not logged: holds the SASL password)."""
        conf: dict[str, str] = {}
        if self.kafka_security_protocol != "PLAINTEXT":
            conf["security.protocol"] = self.kafka_security_protocol
        if self.kafka_sasl_mechanism:
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
            conf["sasl.username"] = self.kafka_sasl_username or ""
            conf["sasl.password"] = self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else ""
        if self.kafka_ssl_cafile:
            conf["ssl.ca.location"] = str(self.kafka_ssl_cafile)
        return conf

    def kafka_producer_config(self) -> dict[str, str]:
        """librdkafka settings of a producer: security plus ``acks`` and ``enable.idempotence`` (not logged)."""
        return {**self.kafka_client_config(), "acks": self.kafka_acks,
                "enable.idempotence": "true" if self.kafka_idempotence else "false"}

    def query_limits(self) -> QueryLimits:
        """The limits user queries run under."""
        return QueryLimits(self.fabricscope_query_max_execution_time_s, self.fabricscope_query_max_result_rows,
                           self.fabricscope_query_max_result_bytes, self.fabricscope_query_max_threads,
                           self.fabricscope_query_max_memory_bytes, self.fabricscope_query_readers,
                           self.fabricscope_query_short_s)

    def endpoint_limits(self) -> EndpointLimits:
        """What one client of the store writer's endpoint may cost it."""
        from sinks.query_endpoint import EndpointLimits

        return EndpointLimits(self.fabricscope_endpoint_max_connections, self.fabricscope_endpoint_request_timeout_s,
                              self.fabricscope_endpoint_idle_timeout_s, self.fabricscope_endpoint_max_body_bytes,
                              self.fabricscope_query_readers)

    def clickhouse_dsn(self) -> str | None:
        """The server URL, or None for the embedded store."""
        return self.clickhouse_url.get_secret_value() if self.clickhouse_url else None


def _secret(name: str) -> bool:
    ann = str(Settings.model_fields[name].annotation) if name in Settings.model_fields else ""
    return "SecretStr" in ann


def _explain(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        if not e["loc"]:  # a check across fields: its message names them; the input is every value, secrets too
            lines.append(str(e["msg"]).removeprefix("Value error, "))
            continue
        name = str(e["loc"][0])
        shown = "" if _secret(name) else f"={e.get('input')!r}"
        lines.append(f"{name.upper()}{shown}: {e['msg']}")
    return ("invalid setting" + ("s" if len(lines) > 1 else "") + " (environment or .env):\n  "
            + "\n  ".join(lines) + "\nFix the variable and start again (docs/configuration.md).")


def env_file_typos(path: str | Path = ENV_FILE) -> list[str]:
    """Keys in the ``.env`` file at ``path`` that look like a misspelt setting (a silent no-op otherwise)."""
    p = Path(path)
    if not p.is_file():
        return []
    fields = [f.upper() for f in Settings.model_fields]
    out = []
    for raw in p.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key = line.split("=", 1)[0].strip().removeprefix("export ").strip().upper()
        if key in fields:
            continue
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.85)
        if close:
            out.append(f"{key} in {p} is not a setting; did you mean {close[0]}?")
    return out


READ_BY_THE_SCRIPTS = frozenset({"KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "KAFKA_CLUSTER_PORT",
                                 "KAFKA_CLUSTER_CONTROLLER_PORT", "KAFKA_SASL_PLAIN_USER", "KAFKA_SASL_PLAIN_PASSWORD"})
"""Variables ``infra/kafka/kafka.sh`` reads (the broker's side), not settings of this process."""


def environment_typos(environ: dict[str, str] | None = None) -> list[str]:
    """Environment variables that look like a misspelt setting (a silent no-op otherwise).

    Only names within a close edit of a setting's are reported, so variables read elsewhere (docs/configuration.md,
    "Other variables") are not.
    """
    fields = [f.upper() for f in Settings.model_fields]
    env = os.environ if environ is None else environ
    out = []
    for key in sorted(env):
        if key in fields or key in READ_BY_THE_SCRIPTS or not key.startswith(("FABRICSCOPE_", "KAFKA_", "CLICKHOUSE_")):
            continue
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.85)
        if close and close[0] not in env:
            out.append(f"{key} in the environment is not a setting; did you mean {close[0]}?")
    return out


def read_settings() -> Settings:
    """Read and validate settings (environment, then ``.env``).

    Raises:
        ConfigError: a bad value (the message names the variable, its value unless secret, and the
            allowed values), or a misspelt key in ``.env``.
    """
    typos = env_file_typos()
    if typos:
        raise ConfigError("\n".join(typos))
    try:
        return Settings()
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None


def load() -> Settings:
    """Settings for a command: on a :class:`ConfigError` print its message (no traceback) and exit 2."""
    for typo in environment_typos():  # a warning, not a refusal: another tool may own a variable of that shape
        print(f"fabricscope: warning: {typo}", file=sys.stderr)
    try:
        return read_settings()
    except ConfigError as err:
        print(f"fabricscope: {err}", file=sys.stderr)
        raise SystemExit(2) from None
