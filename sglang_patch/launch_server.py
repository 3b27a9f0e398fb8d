"""``python -m sglang_patch.launch_server --cache-policy laru [options] [SGLang args]``.

Translates the cache policy into SGLang's own flags and starts SGLang's server:
``lru`` is stock SGLang, untouched; every policy SGLang serves from lcr's radix registry
(``lcr.kv.registry``: laru, fpb, hf, rlt, lpc) selects the ``lcr-<policy>`` radix-cache
backend and passes its options as ``--radix-eviction-policy-config`` JSON. A policy's own
options are flags ``--<policy>-<option>`` derived from its declaration (e.g. ``--laru-b``,
``--hf-window``); the predictor's are shared. Every other argument goes to SGLang as is.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

from lcr.errors import LcrInputError
from lcr.predict.token import TOKEN_ENV
from lcr.integrations.sglang_config import (DEFAULT_PREDICTOR, DEFAULTS, PREDICTOR_OPTIONS, PREDICTORS,
                                            PolicyConfig, build_policy, option_parameter,
                                            served)
from lcr.kv import registry

def policies() -> tuple[str, ...]:
    """``lru`` (stock SGLang) and every policy the radix registry serves."""
    return ("lru", *registry.SERVED)


_OWN_FLAGS = ("--radix-cache-backend", "--radix-eviction-policy-config")


class _Parser(argparse.ArgumentParser):
    """Bad flags are one line (LcrInputError), not argparse's usage block."""

    def error(self, message):
        raise LcrInputError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m sglang_patch.launch_server", add_help=False, allow_abbrev=False,
                                description=__doc__)
    p.add_argument("--cache-policy", default="lru", help=f"one of {', '.join(policies())}")
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
    p.add_argument("--predictor-noise", type=float,
                   help="probability in [0, 1] that each prediction is negated (ranks its key the opposite "
                        f"way; seeded, as lcr sim-kv --noise), for robustness runs "
                        f"(default {DEFAULTS['predictor_noise']:g})")
    for policy, option in _policy_flags():
        kind, meaning, default = option_parameter(policy, option)
        p.add_argument(_flag(policy, option), type=kind, dest=f"{policy}:{option}", metavar=option.upper(),
                       help=f"{policy}: {meaning} (default {default})")
    p.add_argument("--lcr-help", action="help", help="show these options and exit")
    return p


def _policy_flags() -> list[tuple[str, str]]:
    """(policy, option) of every served policy's own options."""
    return [(policy, option) for policy in registry.SERVED for option in served(policy).serving.options()]


def _flag(policy: str, option: str) -> str:
    return f"--{policy}-{option.replace('_', '-')}"


def translate(argv: list[str]) -> list[str]:
    """SGLang's arguments for ``argv`` (raises LcrInputError on bad input)."""
    ours, rest = _parser().parse_known_args(argv)
    policy = ours.cache_policy
    if policy not in policies():
        raise LcrInputError(f"unknown --cache-policy {policy!r}; valid: {', '.join(policies())}")
    stray = [a.split("=")[0] for a in rest if a.startswith(tuple(f"--{name}-" for name in registry.SERVED))]
    if stray:  # a removed or misspelt policy option must not reach SGLang as an unknown flag
        owner = next(name for name in registry.SERVED if stray[0].startswith(f"--{name}-"))
        valid = ", ".join(_flag(owner, option) for option in served(owner).serving.options()) or "none"
        raise LcrInputError(f"unknown flag {stray[0]}; {owner}'s flags: {valid}")
    values = vars(ours)
    options = {option: values[option] for option in PREDICTOR_OPTIONS if values.get(option) is not None}
    for owner, option in _policy_flags():
        value = values[f"{owner}:{option}"]
        if value is None:
            continue
        if owner != policy and policy != "lru":
            raise LcrInputError(f"{_flag(owner, option)} is an option of --cache-policy {owner}, not {policy}")
        options[option] = os.path.abspath(value) if option == "model" else value  # the server may run elsewhere
    if policy == "lru":
        if options:
            raise LcrInputError(f"--cache-policy lru is stock SGLang; it takes no {', '.join(sorted(options))}")
        return rest
    clash = [flag for flag in _OWN_FLAGS if any(a == flag or a.startswith(flag + "=") for a in rest)]
    if clash:
        raise LcrInputError(f"--cache-policy {policy} sets {', '.join(clash)} itself; drop it")
    config = PolicyConfig.parse(policy, options)  # unknown or out-of-range options fail here
    build_policy(config, 1)  # so do values only the policy checks, and an unreachable predictor_url
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
