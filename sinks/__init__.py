"""Sinks: the ClickHouse writer (server or embedded chdb) and the chatops sender."""
