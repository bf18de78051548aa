"""R-Pingmesh analytics (SIGCOMM 2024): RTT decomposition, validation, 20 s windows, path index,
mergeable window partials, timeout triage, tomography votes, latency rule, impact grading, the
window reducer and blame. Pure functions and small classes over Arrow tables; no Faust, no Kafka."""
