"""`lcr sim --domain moe`: layered-paging traces and the policies that need their shape."""
from __future__ import annotations

from lcr.policies import POLICIES
from lcr.sim.sweep import PolicySpec
from lcr.traces import Trace
from lcr.traces.moe import check_layered

DEFAULT_POLICIES = "opt,lru,llru,lru_dist,marker,opt_dist"
DEFAULT_CACHE = "25%,50%,75%"  # of all experts; split caches need k >= layers


def pages(trace: Trace) -> int:
    """Every expert of the model: layers x experts."""
    return int(trace.meta["layers"]) * int(trace.meta["experts"])


def shape_params(trace: Trace) -> dict:
    """What a layered policy needs to know about the trace's model."""
    params = {"layers": int(trace.meta["layers"]), "experts": int(trace.meta["experts"])}
    if trace.meta.get("rounds") == "native":
        params["native_rounds"] = 1
    return params


def with_shape(spec: PolicySpec, trace: Trace) -> PolicySpec:
    """``spec`` with the trace's layers/experts filled in (explicit ones win)."""
    if not POLICIES[spec.name].layered:
        return spec
    given = dict(spec.params)
    missing = tuple((k, v) for k, v in shape_params(trace).items() if k not in given)
    return PolicySpec(spec.name, spec.params + missing)


def prepare(trace: Trace, specs: list[PolicySpec]) -> list[PolicySpec]:
    """Check that ``trace`` is layered and give every layered policy its shape."""
    check_layered(trace)
    return [with_shape(spec, trace) for spec in specs]
