"""fabricscope: the console script that wires producers, streams, sinks and schemas together."""
