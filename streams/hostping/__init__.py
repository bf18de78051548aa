"""Hostping analytics (NSDI 2023): loopback bandwidth matrices, Algorithm 1 link states, named
intra-host patterns, the per-host stream step and plots. Pure code over Arrow tables; no Faust, no Kafka."""
