"""lcr: learning-augmented caching for GPU inference.

The pieces, lowest layer first (docs/architecture.md; tests/test_layers.py keeps them so):
  lcr.traces    trace readers, generators and next-use computation
  lcr.policies  the pure-Python spec of every item-cache policy
  lcr.predict   next-access predictors (oracle, noisy, the online LightGBM model, the service)
  lcr.sim       item-cache replay, sweeps, reports and plots
  lcr.kv        radix (prefix) caches: policies, lcr's tree, sim-kv
  lcr.embedding SlabHashCache, SparseLengthsSum (lcr.sls) and backing stores (needs torch)
  lcr.moe       expert paging; lcr.checkpoints: sparse prefix checkpoints
  lcr.lpc       learned prefix caching; lcr.route: routing across serving workers
  lcr.integrations  SGLang backends

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
