"""Kafka security and delivery for the Faust app: librdkafka-style settings to Faust ``broker_credentials``,
idempotent ``acks=all`` producers, and the replication of Faust's own topics.

The confluent-kafka clients (agent producer, store writer, topic mirrors) take the
librdkafka settings of ``Settings.kafka_client_config()`` as they are; Faust
(aiokafka) wants a credentials object instead. :func:`faust_credentials` makes
that object from the same settings, so one set of environment variables
(``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*``, ``KAFKA_SSL_CAFILE``) reaches
every client. The password goes into the object and nowhere else: Faust's
``repr`` of it shows the user name only.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types.auth import CredentialsT

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _ssl_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=conf.get("ssl.ca.location") or None)


def faust_credentials(conf: Mapping[str, str]) -> CredentialsT | None:
    """Faust ``broker_credentials`` for librdkafka settings ``conf``; None for plaintext.

    Args:
        conf: ``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
            ``ssl.ca.location`` (absent keys: plaintext, PLAIN, system CAs).

    Raises:
        ValueError: an unknown ``security.protocol`` (the message names KAFKA_SECURITY_PROTOCOL).
    """
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return faust.SSLCredentials(_ssl_context(conf))
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        return faust.SASLCredentials(
            username=conf.get("sasl.username") or None,
            password=conf.get("sasl.password") or None,
            mechanism=conf.get("sasl.mechanism") or "PLAIN",
            ssl_context=_ssl_context(conf) if protocol == "SASL_SSL" else None,
        )
    raise ValueError(f"KAFKA_SECURITY_PROTOCOL={protocol!r} is not one of {', '.join(PROTOCOLS)}")


class IdempotentProducer(aiokafka_driver.Producer):
    """Faust's aiokafka producer with ``enable_idempotence`` when the app asks for it.

    Faust turns idempotence on only inside its exactly-once transactions; outside them a retried
    send after a leader change could write a batch twice. ``acks=all`` comes from ``producer_acks=-1``.
    """

    def _settings_extra(self) -> Mapping[str, Any]:
        extra = dict(super()._settings_extra())
        if getattr(self.app, "idempotent_producer", False):
            extra.update({"acks": "all", "enable_idempotence": True})
        return extra


class IdempotentTransport(aiokafka_driver.Transport):
    """The aiokafka transport whose producers are :class:`IdempotentProducer`."""

    Producer = IdempotentProducer


class App(faust.App):
    """A Faust app whose producers are idempotent with ``acks=all`` (``idempotent_producer``; default on).

    Only ``kafka://`` brokers (aiokafka) are used by fabricscope, so the transport is fixed here.
    """

    idempotent_producer: bool = True

    def _new_transport(self) -> IdempotentTransport:
        return IdempotentTransport(self.conf.broker_consumer, self)

    def _new_producer_transport(self) -> IdempotentTransport:
        return IdempotentTransport(self.conf.broker_producer, self)


def faust_delivery(acks: str, replication: int | None) -> dict[str, Any]:
    """Faust settings for producer delivery and the replication of topics Faust creates itself
    (changelogs, its leader topic): ``producer_acks`` (-1 = all) and ``topic_replication_factor``.

    Args:
        acks: ``"all"``, ``"1"`` or ``"0"`` (``KAFKA_ACKS``; idempotence is :attr:`App.idempotent_producer`).
        replication: replicas for Faust's topics; None = Faust's default of 1 (``fabricscope worker``
            sets ``KAFKA_REPLICATION_FACTOR`` to min(3, brokers) before the app is built).
    """
    out: dict[str, Any] = {"producer_acks": -1 if acks == "all" else int(acks)}
    if replication is not None:
        out["topic_replication_factor"] = replication
    return out
