"""``python -m sglang_patch.launch_server --cache-policy laru [options] [SGLang args]``.

Translates the cache policy into SGLang's own flags and starts SGLang's server:
``lru`` is stock SGLang, untouched; ``laru``, ``fpb``, ``hf``, ``rlt`` and ``lpc`` select the
``lcr-<policy>`` radix-cache backend and pass their options as
``--radix-eviction-policy-config`` JSON. Every other argument goes to SGLang as is.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

from lcr.errors import LcrInputError
from lcr.predict.token import TOKEN_ENV
from lcr.integrations.sglang_config import (DEFAULT_PREDICTOR, DEFAULTS, PREDICTORS, PolicyConfig,
                                            make_serving_predictor)

POLICIES = ("lru", "laru", "fpb", "hf", "rlt", "lpc")
_OWN_FLAGS = ("--radix-cache-backend", "--radix-eviction-policy-config")


class _Parser(argparse.ArgumentParser):
    """Bad flags are one line (LcrInputError), not argparse's usage block."""

    def error(self, message):
        raise LcrInputError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m sglang_patch.launch_server", add_help=False,
                                description=__doc__)
    p.add_argument("--cache-policy", default="lru", help=f"one of {', '.join(POLICIES)}")
    p.add_argument("--laru-b", type=float, help="LARU: lambda is divided by b (default 2)")
    p.add_argument("--laru-k", type=int, help="LARU: cache size k in nodes (default: cached nodes at each phase start)")
    p.add_argument("--laru-shrink-every", type=int,
                   help="LARU: prediction-induced misses per lambda step (default 1; 0: k // 32)")
    p.add_argument("--hf-window", type=int, help="HF: candidate window in leaves (default 4)")
    p.add_argument("--rlt-seed", type=int, help="RLT: random seed (default 0)")
    p.add_argument("--predictor", choices=PREDICTORS,
                   help=f"in-process predictor (default {DEFAULT_PREDICTOR})")
    p.add_argument("--predictor-url", help="a running `lcr serve-predictor` (http://host:port) instead of "
                   f"in-process; its token, if any, from ${TOKEN_ENV}")
    p.add_argument("--predictor-timeout-ms", type=float,
                   help=f"a prediction slower than this backs off (default {DEFAULTS['predictor_timeout_ms']:g})")
    p.add_argument("--predictor-backoff-s", type=float,
                   help=f"serve LRU this long after a slow or failed prediction "
                        f"(default {DEFAULTS['predictor_backoff_s']:g})")
    p.add_argument("--predictor-budget-ms", type=float,
                   help=f"predictor time per eviction pass (default {DEFAULTS['predictor_budget_ms']:g})")
    p.add_argument("--lpc-model", help="LPC: predictor file from `lcr lpc-train --model lightgbm --features length` "
                   "(default: none, every request gets the prior: LRU order)")
    p.add_argument("--lpc-splitter", help="LPC: chat template whose role markers split a prompt into user turns "
                   "(auto, chatml, llama3, llama2, gemma, phi3, none; default auto)")
    p.add_argument("--lpc-scale", type=float, help="LPC: decay rate per second (default 0.01)")
    p.add_argument("--lcr-help", action="help", help="show these options and exit")
    return p


def translate(argv: list[str]) -> list[str]:
    """SGLang's arguments for ``argv`` (raises LcrInputError on bad input)."""
    ours, rest = _parser().parse_known_args(argv)
    policy = ours.cache_policy
    if policy not in POLICIES:
        raise LcrInputError(f"unknown --cache-policy {policy!r}; valid: {', '.join(POLICIES)}")
    options = {key: value for key, value in (
        ("b", ours.laru_b), ("k", ours.laru_k), ("shrink_every", ours.laru_shrink_every),
        ("window", ours.hf_window), ("seed", ours.rlt_seed), ("predictor", ours.predictor),
        ("predictor_url", ours.predictor_url), ("predictor_timeout_ms", ours.predictor_timeout_ms),
        ("predictor_backoff_s", ours.predictor_backoff_s), ("predictor_budget_ms", ours.predictor_budget_ms),
        ("model", ours.lpc_model and os.path.abspath(ours.lpc_model)), ("splitter", ours.lpc_splitter), ("scale", ours.lpc_scale),
    ) if value is not None}
    if policy == "lru":
        if options:
            raise LcrInputError(f"--cache-policy lru is stock SGLang; it takes no {', '.join(sorted(options))}")
        return rest
    clash = [flag for flag in _OWN_FLAGS if any(a == flag or a.startswith(flag + "=") for a in rest)]
    if clash:
        raise LcrInputError(f"--cache-policy {policy} sets {', '.join(clash)} itself; drop it")
    config = PolicyConfig.parse(policy, options)  # unknown or out-of-range options fail here
    if "predictor_url" in options:
        make_serving_predictor(options)  # unreachable at start: a clear error now, not later
    return [*rest, "--radix-cache-backend", f"lcr-{policy}",
            "--radix-eviction-policy-config", json.dumps(config.options)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        sglang_args = translate(argv)
    except LcrInputError as err:
        print(f"sglang_patch.launch_server: error: {err}", file=sys.stderr)
        return 2
    from sglang_patch import register

    register()  # the launcher process resolves --radix-cache-backend too
    sys.argv = ["sglang.launch_server", *sglang_args]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
