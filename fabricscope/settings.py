"""Settings from the environment (or a ``.env`` file), validated by pydantic-settings.

Secrets (SASL password, ClickHouse URL with credentials, webhook URLs) are
``SecretStr``: they never appear in ``repr`` or logs. A typo in a variable's
value fails at start with the variable's name and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """fabricscope's configuration. Every field reads the environment variable of the same name, upper-case."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers host:port[,...]")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None
    clickhouse_url: SecretStr | None = Field(None, description="http://user:pw@host:8123/db; unset = embedded chdb")
    fabricscope_var: Path = Field(Path("var"), description="local state: Kafka data, embedded store, lab state")
    fabricscope_topic_prefix: str = ""

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

    def clickhouse_dsn(self) -> str | None:
        """The server URL, or None for the embedded store."""
        return self.clickhouse_url.get_secret_value() if self.clickhouse_url else None


def load() -> Settings:
    """Read settings; a bad value raises pydantic's ValidationError naming the variable."""
    return Settings()
