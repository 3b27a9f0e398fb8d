"""A fitted LightGBM booster flattened into ``lcr._native.Forest`` for fast prediction.

Read from the booster's model text (``model_to_string``: every number printed to round
trip exactly), which costs a fraction of ``dump_model``'s JSON on each fit. Only numerical
splits are supported (all of lcr's features are numerical); for anything else
``compile_booster`` returns None and callers keep using ``booster.predict``.
"""
from __future__ import annotations

import numpy as np


class BoosterMean:
    """Several boosters read as one: the mean of their raw outputs (a mix of classifiers,
    one per label boundary; ``LightGBMConfig.boundary_fractions``)."""

    def __init__(self, members: list):
        self.members = list(members)

    def predict(self, rows, num_threads: int = 0, raw_score: bool = True):
        return sum(m.predict(rows, num_threads=num_threads, raw_score=True) for m in self.members) / len(self.members)

    def num_trees(self) -> int:
        return sum(m.num_trees() for m in self.members)


# LightGBM's decision_type bits: categorical, default left, then the missing type.
_CATEGORICAL, _DEFAULT_LEFT = 1, 2
_NODE_FIELDS = ("split_feature", "threshold", "decision_type", "left_child", "right_child")


def compile_booster(booster, num_features: int, method: str = "auto"):
    """A native forest equal to ``booster.predict`` (raw regression output), or None.
    A ``BoosterMean`` compiles to one forest of all its members' trees, each leaf scaled
    by 1 / members, so the forest's output is the members' mean raw output.

    ``method``: how the native forest evaluates (``lcr._native.Forest``); tests pin one."""
    from lcr import _native

    members = booster.members if isinstance(booster, BoosterMean) else [booster]
    blocks = []
    for member in members:
        text = member.model_to_string()
        header = _fields(text[:text.find("\nTree=")])
        if header.get("num_tree_per_iteration", "1") != "1":
            return None
        blocks += text.split("\nTree=")[1:]
    parts = {name: [] for name in (*_NODE_FIELDS, "leaf_value")}
    roots, nodes, leaves = [], 0, 0
    for block in blocks:
        tree = _fields(block[:block.find("\n\n")] if "\n\n" in block else block)
        if tree.get("num_cat", "0") != "0":
            return None
        leaf_value = np.array(tree["leaf_value"].split(), dtype=np.float64) / len(members)
        arrays = {name: np.array(tree[name].split(), dtype=np.float64 if name == "threshold" else np.int64)
                  for name in _NODE_FIELDS}
        if np.any(arrays["decision_type"] & _CATEGORICAL):
            return None
        # Children: >= 0 a node of this tree, < 0 leaf ~child of this tree; renumber globally.
        for side in ("left_child", "right_child"):
            child = arrays[side]
            arrays[side] = np.where(child >= 0, child + nodes, ~(~child + leaves))
        roots.append(nodes if len(arrays["split_feature"]) else ~leaves)
        for name in _NODE_FIELDS:
            parts[name].append(arrays[name])
        parts["leaf_value"].append(leaf_value)
        nodes += len(arrays["split_feature"])
        leaves += len(leaf_value)
    joined = {name: np.concatenate(arrays) if arrays else np.zeros(0) for name, arrays in parts.items()}
    decision = joined["decision_type"].astype(np.int64)
    return _native.Forest(feature=joined["split_feature"].astype(np.int32).tolist(),
                          threshold=joined["threshold"].tolist(),
                          left=joined["left_child"].astype(np.int32).tolist(),
                          right=joined["right_child"].astype(np.int32).tolist(),
                          missing=((decision >> 2) & 3).tolist(),
                          default_left=((decision & _DEFAULT_LEFT) != 0).astype(np.uint8).tolist(),
                          leaf_value=joined["leaf_value"].tolist(), roots=roots, num_features=num_features,
                          method=method)


def _fields(block: str) -> dict[str, str]:
    """``key=value`` lines of one section of LightGBM's model text."""
    return dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
