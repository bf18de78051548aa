"""One collector per input kind, each a module with ``NAME``, ``READS``, ``detect``, ``parse`` and
``findings`` (see :class:`diagnose.registry.Collector`); :data:`diagnose.registry.COLLECTORS`
lists them in output order."""
