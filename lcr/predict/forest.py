"""A fitted LightGBM booster flattened into ``lcr._native.Forest`` for fast prediction.

Only numerical splits are supported (all of lcr's features are numerical); for anything
else ``compile_booster`` returns None and callers keep using ``booster.predict``.
"""
from __future__ import annotations

_MISSING = {"None": 0, "Zero": 1, "NaN": 2}


def compile_booster(booster, num_features: int, method: str = "auto"):
    """A native forest equal to ``booster.predict`` (raw regression output), or None.

    ``method``: how the native forest evaluates (``lcr._native.Forest``); tests pin one."""
    from lcr import _native

    model = booster.dump_model()
    if model.get("num_tree_per_iteration", 1) != 1:
        return None
    nodes = {"feature": [], "threshold": [], "left": [], "right": [], "missing": [], "default_left": []}
    leaves: list[float] = []

    def flatten(tree: dict) -> int:
        if "leaf_value" in tree:
            leaves.append(float(tree["leaf_value"]))
            return ~(len(leaves) - 1)
        if tree.get("decision_type") != "<=" or tree.get("missing_type") not in _MISSING:
            raise _Unsupported
        index = len(nodes["feature"])
        nodes["feature"].append(int(tree["split_feature"]))
        nodes["threshold"].append(float(tree["threshold"]))
        nodes["missing"].append(_MISSING[tree["missing_type"]])
        nodes["default_left"].append(int(bool(tree["default_left"])))
        nodes["left"].append(0)
        nodes["right"].append(0)
        nodes["left"][index] = flatten(tree["left_child"])
        nodes["right"][index] = flatten(tree["right_child"])
        return index

    try:
        roots = [flatten(info["tree_structure"]) for info in model["tree_info"]]
    except _Unsupported:
        return None
    return _native.Forest(leaf_value=leaves, roots=roots, num_features=num_features, method=method, **nodes)


class _Unsupported(Exception):
    """A split the native forest does not implement (categorical, multiclass)."""
