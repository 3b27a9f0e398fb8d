"""Options of the lcr radix-cache backends (``--radix-eviction-policy-config`` JSON),
and the policy they build. Kept free of SGLang imports so the launcher and tests can
validate options without loading SGLang."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from lcr.errors import LcrInputError
from lcr.kv import policies as P
from lcr.kv.predictors import LightGBMNodePredictor, RecentIntervalsPredictor, ServicePredictor

log = logging.getLogger(__name__)

POLICY_OPTIONS = {
    "laru": {"b", "k", "shrink_every", "predictor", "predictor_url", "predictor_timeout_ms"},
    "fpb": {"predictor", "predictor_url", "predictor_timeout_ms"},
    "hf": {"window", "predictor", "predictor_url", "predictor_timeout_ms"},
    "rlt": {"seed"},
    "lpc": {"scale", "prior"},  # lcr.lpc.serving: no request text reaches the policy yet
}
PREDICTORS = ("lightgbm", "intervals")


@dataclass
class PolicyConfig:
    policy: str
    options: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, policy: str, raw) -> "PolicyConfig":
        if policy not in POLICY_OPTIONS:
            raise LcrInputError(f"unknown cache policy {policy!r}; valid: lru, {', '.join(POLICY_OPTIONS)}")
        if raw is None or raw == "":
            raw = {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as err:
                raise LcrInputError(f"{policy} options: malformed JSON ({err.msg})") from None
        if not isinstance(raw, dict):
            raise LcrInputError(f"{policy} options: expected a JSON object, got {type(raw).__name__}")
        unknown = set(raw) - POLICY_OPTIONS[policy]
        if unknown:
            raise LcrInputError(f"{policy} options: unknown {', '.join(sorted(unknown))}; "
                                f"valid: {', '.join(sorted(POLICY_OPTIONS[policy]))}")
        predictor = raw.get("predictor")
        if predictor is not None and predictor not in PREDICTORS:
            raise LcrInputError(f"{policy} options: unknown predictor {predictor!r}; "
                                f"valid: {', '.join(PREDICTORS)} (or predictor_url)")
        return cls(policy, dict(raw))

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.options.items())) or "defaults"


def make_serving_predictor(options: dict):
    """A service at ``predictor_url``, else LightGBM when lcr has it, else the
    recent-intervals estimate (the same per-node history the LightGBM features use)."""
    url = options.get("predictor_url")
    if url:
        return ServicePredictor(url, timeout_s=options.get("predictor_timeout_ms", 50) / 1000)
    if options.get("predictor", "lightgbm") == "lightgbm":
        try:
            return LightGBMNodePredictor()
        except LcrInputError as err:  # lightgbm not installed: serve with the simple estimate
            log.warning("LARU predictor: %s; using recent intervals instead", err)
    return RecentIntervalsPredictor()


def build_policy(config: PolicyConfig, capacity_tokens: int, page_size: int = 1) -> P.LeafPolicy:
    o = config.options
    if config.policy == "rlt":
        return P.RLT(seed=int(o.get("seed", 0)), whole_leaf=True)  # SGLang evicts whole nodes
    if config.policy == "lpc":
        from lcr.lpc.serving import serving_lpc

        return serving_lpc(**o)
    predictor = make_serving_predictor(o)
    if config.policy == "laru":
        return P.LARU(predictor, k=o.get("k"), b=float(o.get("b", 2.0)), shrink_every=o.get("shrink_every"))
    if config.policy == "fpb":
        return P.FPB(predictor)
    return P.HF(predictor, window=int(o.get("window", 4)))
