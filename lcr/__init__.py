"""lcr: learning-augmented caching for GPU inference.

The pieces, by layer (see docs/architecture.md):
  lcr.policies  the pure-Python spec of every eviction policy
  lcr.traces    trace readers, generators and next-use computation
  lcr.predict   next-access predictors (oracle, noisy, constant; LightGBM later)
  lcr.sim       trace replay, sweeps, reports and plots
  lcr.embedding SlabHashCache, SparseLengthsSum (lcr.sls) and backing stores (needs torch)

The embedding names below are loaded on first use, so importing lcr never imports torch.
"""

__version__ = "0.1.0"

_LAZY = {
    "SlabHashCache": "lcr.embedding.cache",
    "sls": "lcr.embedding.sls",
    "HostStore": "lcr.embedding.stores",
    "RedisStore": "lcr.embedding.stores",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lcr' has no attribute {name!r}")
