"""Probe rows as the worker and the store writer both judge them: validation, decomposition, retention, minute tier."""
