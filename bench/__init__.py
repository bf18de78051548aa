"""Benchmarks: scripts that print figures (accuracy, agent cost, throughput, profile, history).

Run through `fabricscope bench ...`; never imported by the pipeline itself."""
