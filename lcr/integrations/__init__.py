"""Adapters that put lcr's policies inside serving engines (optional dependencies)."""
