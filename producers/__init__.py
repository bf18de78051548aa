"""Host agents: controller/pinglists, probe backends (sim, udp, verbs), tracer, loopback, hardware monitor,
Kafka producer.

Agent processes never import pyarrow (docs/design.md): batches are built with nanoarrow.
"""
