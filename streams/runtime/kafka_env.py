"""Kafka security for the Faust app: librdkafka-style settings to Faust ``broker_credentials``.

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

import faust
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
