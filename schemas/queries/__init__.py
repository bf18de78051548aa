"""Saved queries: plain ClickHouse SQL files (see schemas/saved_queries.py)."""
