"""Shared test helpers: where the real traces live, and small trace builders."""
from __future__ import annotations

from pathlib import Path

import pytest

from lcr.traces import Trace, load_trace

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Real traces with a slice length that keeps the pure-Python spec quick.
REAL_TRACES = {
    "cloudphysics": ("classic/cloudPhysicsIO.oracleGeneral.bin", 30_000),
    "web07": ("classic/cache2k_web07.trace.xz", 30_000),
    "multi2": ("classic/lirs/multi2.trace.gz", 26_311),
    "swim": ("classic/address/swim.trace.gz", 20_000),
    "twolf": ("classic/address/twolf.trace.gz", 20_000),
    "mooncake": ("kv/mooncake_conversation_trace.jsonl", 1_000),  # prompts, i.e. ~24k blocks
    "criteo": ("embedding/criteo_kaggle_first999.tsv", None),
    "switch_moe": ("moe/router-trace.v2.json", None),
}


def real_trace(name: str) -> Trace:
    relative, limit = REAL_TRACES[name]
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"{path} not present (shared data is optional)")
    if relative.endswith(".jsonl"):  # the slice counts prompts here, not block requests
        return load_trace(str(path)).first_prompts(limit)
    return load_trace(str(path), limit=limit)


def data_file(relative: str) -> Path:
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"{path} not present (shared data is optional)")
    return path
