"""lcr's eviction counters next to SGLang's own Prometheus metrics (``--enable-metrics``).

SGLang's radix-cache collector labels its series (cache class, parallel ranks); the
same labels go on ours, so dashboards can put ``sglang:lcr_*`` beside SGLang's cache
hit rate. Counters are created once per process, as prometheus_client requires.
"""
from __future__ import annotations

DESCRIPTIONS = {
    "evictions": "Nodes evicted by the lcr policy",
    "prediction_evictions": "Evictions chosen by a next-access prediction",
    "predictor_fallbacks": "Evictions that fell back to LRU because the predictor failed",
    "prediction_induced_misses": "Misses on nodes a prediction evicted in the current phase",
    "induced_misses_paid": "Induced misses paid from the lead over the LRU twin (the window kept)",
    "lru_twin_hit_tokens": "Prompt tokens the LRU twin (radix LARU's yardstick) served from its cache",
    "phases": "Radix LARU's phases (each starts trusted or LRU, docs/kv.md)",
    "races_won": "Radix LARU's races its predictions won (the window's oldest leaf came back first)",
    "races_lost": "Radix LARU's races its predictions lost (their victim came back first)",
    "leads_forgiven": "Radix LARU's trusted stretches that fell behind the LRU twin with no cost shown (kept trusted)",
    "policy_seconds": "Time spent choosing victims, predictor calls included",
    "eviction_passes": "Eviction passes (calls of the radix cache's evict)",
    "eviction_seconds": "Time of whole eviction passes: victim choice, SGLang's tree and KV frees",
    # LPC (lcr.lpc.serving): where each request's prompt text came from, and its fallbacks
    "lpc_requests_text": "LPC requests whose prompt text was decoded from their token ids",
    "lpc_requests_without_text": "LPC requests without text: they got the prior (LRU order)",
    "lpc_requests_one_turn": "LPC requests without chat-template role markers (one user turn)",
    "lpc_prediction_failures": "LPC predictions that failed: the request got the prior",
    "lpc_requests_backed_off": "LPC requests given the prior while a failed or slow predictor backs off",
    "lpc_predict_seconds": "Time of LPC's per-request predictions: decode, split, features, model",
}
_COUNTERS: dict[tuple[str, tuple[str, ...]], object] = {}


def _counter(name: str, labelnames: tuple[str, ...]):
    from prometheus_client import Counter

    key = (name, labelnames)
    if key not in _COUNTERS:
        _COUNTERS[key] = Counter(f"sglang:lcr_{name}", DESCRIPTIONS[name], labelnames=labelnames)
    return _COUNTERS[key]


class PolicyMetricsExporter:
    """Adds what the policy counted since the last update to the Prometheus counters."""

    def __init__(self, labels: dict[str, str]):
        labelnames = tuple(sorted(labels))
        self._series = {name: _counter(name, labelnames).labels(**labels) if labelnames
                        else _counter(name, labelnames) for name in DESCRIPTIONS}
        self._reported = dict.fromkeys(DESCRIPTIONS, 0.0)

    def update(self, metrics: dict) -> None:
        for name, series in self._series.items():
            delta = float(metrics.get(name, 0)) - self._reported[name]
            if delta > 0:
                series.inc(delta)
                self._reported[name] += delta
