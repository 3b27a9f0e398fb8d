"""Options of the lcr radix-cache backends (``--radix-eviction-policy-config`` JSON),
and the policy they build. Kept free of SGLang imports so the launcher and tests can
validate options without loading SGLang."""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field

import lcr.lpc.sim  # noqa: F401  (registers lpc, which SGLang serves)
from lcr.errors import LcrInputError
from lcr.integrations.serving_predictor import (GuardedPredictor, NoisyPredictor, ServiceNodePredictor,
                                                check_service_url)
from lcr.kv import registry
from lcr.kv.policies import LeafPolicy
from lcr.kv.predictors import LearnedNodePredictor, RecentIntervalsPredictor, check_probability
from lcr.predict.residual import ResidualLifePredictor

log = logging.getLogger(__name__)

PREDICTOR_OPTIONS = ("predictor", "predictor_url", "predictor_timeout_ms", "predictor_backoff_s",
                     "predictor_budget_ms", "predictor_noise")


def policy_options(policy: str) -> tuple[str, ...]:
    """What ``--cache-policy policy`` takes: its serving declaration's own options
    (``lcr.kv.registry``), then the predictor's if it uses predictions."""
    entry = served(policy)
    return entry.serving.options() + (PREDICTOR_OPTIONS if entry.predictive else ())


def served(policy: str) -> registry.RadixPolicy:
    """The registry entry of a policy SGLang serves, or a one-line refusal."""
    if policy not in registry.SERVED:
        raise LcrInputError(f"unknown cache policy {policy!r}; valid: lru, {', '.join(registry.SERVED)}")
    return registry.policy(policy)


PREDICTORS = ("residual", "lightgbm", "intervals")
DEFAULT_PREDICTOR = "residual"  # measured best in replay and serving: docs/kv.md
DEFAULTS = {"predictor_timeout_ms": 50.0, "predictor_backoff_s": 5.0, "predictor_budget_ms": 100.0,
            "predictor_noise": 0.0}

# option -> (kind, lower bound, bound is exclusive, what it means)
_RULES = {
    "b": ("number", 1, True, "LARU's lambda divisor"),
    "credit": ("flag", 0, False, "LARU's window grows back on requests that beat LRU"),
    "window": ("int", 1, False, "HF's candidate window"),
    "seed": ("int", 0, False, "RLT's seed"),
    "predictor_timeout_ms": ("number", 0, True, "predictor timeout"),
    "predictor_backoff_s": ("number", 0, False, "time to serve LRU after a slow or failed prediction"),
    "predictor_budget_ms": ("number", 0, True, "predictor time per eviction pass"),
    "predictor_noise": ("probability", 0, False, "share of predictions negated"),
    "scale": ("number", 0, True, "LPC's decay rate per second"),
    "predict_budget_ms": ("number", 0, True, "LPC prediction time per request before backing off"),
    "predict_backoff_s": ("number", 0, False, "time to give requests the prior after a slow or failed prediction"),
}


def option_parameter(policy: str, name: str):
    """(type, what it means, default) of one of ``policy``'s own serving options, for a
    command-line flag: the rule's kind, else the type of the declaration's default."""
    param = registry.declared_parameters(served(policy).serving.declares)[name]
    default = None if param.default is param.empty else param.default
    kind, *_, meaning = _RULES.get(name, (None, None, None, name.replace("_", " ")))
    kind = {"int": int, "flag": int, "number": float}.get(kind)
    if kind is None:  # the default's type, else the annotation's first type (``float | None``)
        annotation = str(param.annotation).split("|")[0].strip()
        kind = type(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else \
            {"int": int, "float": float}.get(annotation, str)
    return kind, meaning, default


def _check_value(policy: str, name: str, value):
    """``value`` checked against its rule, integers as ints (JSON may write 4.0)."""
    kind, low, exclusive, meaning = _RULES[name]
    if kind == "probability":
        return check_probability(value, f"{policy} option {name} ({meaning})")
    if kind == "flag":
        if value not in (0, 1) or isinstance(value, float) and not value.is_integer():
            raise LcrInputError(f"{policy} option {name} ({meaning}) must be 0 or 1, got {value!r}")
        return int(value)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "int" and not (numeric and float(value).is_integer()):
        raise LcrInputError(f"{policy} option {name} ({meaning}) must be an integer, got {value!r}")
    if not numeric or not math.isfinite(value):
        raise LcrInputError(f"{policy} option {name} ({meaning}) must be a finite number, got {value!r}")
    if value < low or (exclusive and value == low):
        raise LcrInputError(f"{policy} option {name} ({meaning}) must be {'>' if exclusive else '>='} "
                            f"{low}, got {value:g}")
    return int(value) if kind == "int" else value


def _check_lpc(raw: dict) -> None:
    """LPC's own options; a model file is loaded and tried now, so that a missing or
    corrupt one fails at launch, not in the scheduler."""
    from lcr.lpc.templates import SPLITTERS

    if "splitter" in raw and raw["splitter"] not in SPLITTERS:
        raise LcrInputError(f"lpc options: unknown splitter {raw['splitter']!r}; valid: {', '.join(SPLITTERS)}")
    if "model" in raw:
        if not isinstance(raw["model"], str):
            raise LcrInputError(f"lpc options: model must be a path, got {raw['model']!r}")
        from lcr.lpc.serving import load_serving_model

        load_serving_model(raw["model"])


@dataclass
class PolicyConfig:
    policy: str
    options: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, policy: str, raw) -> "PolicyConfig":
        """Options of ``policy`` from JSON text or a dict; every value checked (one rule
        for the launcher and the backend, so a bad value fails at launch)."""
        valid = policy_options(policy)
        if raw is None or raw == "":
            raw = {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as err:
                raise LcrInputError(f"{policy} options: malformed JSON ({err.msg})") from None
        if not isinstance(raw, dict):
            raise LcrInputError(f"{policy} options: expected a JSON object, got {type(raw).__name__}")
        unknown = set(raw) - set(valid)
        if unknown:
            raise LcrInputError(f"{policy} options: unknown {', '.join(sorted(unknown))}; "
                                f"valid: {', '.join(sorted(valid))}")
        raw = dict(raw)
        for name, value in raw.items():
            if name in _RULES:
                raw[name] = _check_value(policy, name, value)
        predictor = raw.get("predictor")
        if predictor is not None and predictor not in PREDICTORS:
            raise LcrInputError(f"{policy} options: unknown predictor {predictor!r}; "
                                f"valid: {', '.join(PREDICTORS)} (or predictor_url)")
        if policy == "lpc":
            _check_lpc(raw)
        if "predictor_url" in raw:
            if predictor is not None:
                raise LcrInputError(f"{policy} options: give predictor or predictor_url, not both")
            if not isinstance(raw["predictor_url"], str):
                raise LcrInputError(f"{policy} options: predictor_url must be a string")
            check_service_url(raw["predictor_url"])
        return cls(policy, dict(raw))

    def describe(self) -> str:
        """The options for logs: a predictor_url's credentials are shown as ***."""
        from lcr.redact import redact_url

        return ", ".join(f"{k}={redact_url(v) if k == 'predictor_url' else v}"
                         for k, v in sorted(self.options.items())) or "defaults"


def _option(options: dict, name: str) -> float:
    return float(options.get(name, DEFAULTS[name]))


def make_serving_predictor(options: dict, check: bool = True) -> GuardedPredictor:
    """The predictor a serving cache uses, behind the time guard: the service at
    ``predictor_url``, else the in-process ``predictor`` (default ``DEFAULT_PREDICTOR``;
    LightGBM without lightgbm installed degrades to recent intervals, with a warning);
    with ``predictor_noise`` > 0 a share of its answers negated (robustness runs)."""
    timeout_s = _option(options, "predictor_timeout_ms") / 1000
    backoff_s = _option(options, "predictor_backoff_s")
    url = options.get("predictor_url")
    if url:
        inner = ServiceNodePredictor(url, timeout_s=timeout_s, retry_after_s=backoff_s, check=check)
    elif options.get("predictor", DEFAULT_PREDICTOR) == "lightgbm":
        try:
            inner = LearnedNodePredictor()
        except LcrInputError as err:  # lightgbm not installed: serve with the simple estimate
            log.warning("LARU predictor: %s; using recent intervals instead", err)
            inner = RecentIntervalsPredictor()
    elif options.get("predictor", DEFAULT_PREDICTOR) == "residual":
        inner = ResidualLifePredictor()
    else:
        inner = RecentIntervalsPredictor()
    noise = _option(options, "predictor_noise")
    if noise > 0:
        inner = NoisyPredictor(inner, noise)
    return GuardedPredictor(inner, timeout_s=timeout_s, backoff_s=backoff_s,
                            pass_budget_s=_option(options, "predictor_budget_ms") / 1000)


def build_policy(config: PolicyConfig, capacity_tokens: int, page_size: int = 1) -> LeafPolicy:
    """The policy a serving cache runs, built by its registry entry's serving declaration."""
    serving = served(config.policy).serving
    own = {k: v for k, v in config.options.items() if k not in PREDICTOR_OPTIONS}
    leading = (make_serving_predictor(config.options),) if registry.policy(config.policy).predictive else ()
    try:
        return serving.target(*leading, **own, **serving.fixed)
    except (TypeError, ValueError) as err:
        raise LcrInputError(f"{config.policy} options: {err}") from None
