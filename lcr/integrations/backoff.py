"""Moved to ``lcr.predict.backoff`` (lcr.lpc needs it too); this name stays only until
tests/test_serving_backoff.py imports the new one."""
from lcr.predict.backoff import Backoff  # noqa: F401
