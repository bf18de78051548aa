"""The one error every store driver raises (its own module so the SQL guard and the drivers share it)."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store refused a statement or could not be opened; the message says which and why."""
