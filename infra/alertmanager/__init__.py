"""Prometheus Alertmanager for fabricscope: config, renderer, start/stop script."""
