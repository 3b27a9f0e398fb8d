"""Routing requests across serving workers that each keep a prefix (KV) cache.

``routers`` holds every routing rule (random, round_robin, cache_aware, lbgr, lbgr_paper)
behind one interface; ``sim`` serves a workload on simulated workers with lcr radix caches;
``workload`` builds routed requests (SGLang's generated shared prefix, prefix-block traces)
with Poisson or Azure-trace arrivals. See docs/routing.md.
"""
