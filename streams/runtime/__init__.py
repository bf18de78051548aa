"""The stream runtime: the Faust app and its agents, topic mirrors, Kafka credentials, worker
metrics, dead-letter rows and the per-message probe step. Thin plumbing over streams.pingmesh and
streams.hostping, configured by the :class:`~streams.runtime.config.RuntimeConfig` its starter
(:func:`streams.runtime.worker.run_worker`) hands in."""
