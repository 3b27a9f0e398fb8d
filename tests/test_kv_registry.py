"""The radix registry (lcr.kv.registry): every consumer derives from it, unknown
parameters are refused wherever they enter, and lcr.kv imports nothing above it.
No SGLang needed (the launcher and backend options are checked without it). ~3 s;
the SGLang backends' side is in test_kv_sglang.py."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import sglang_patch.launch_server as launcher
from lcr.cli import main
from lcr.errors import LcrInputError
from lcr.integrations import sglang_config
from lcr.kv import registry
from lcr.kv.policies import RadixLRU


def test_importing_the_radix_layer_pulls_in_nothing_above_it():
    # A fresh interpreter: this process has lcr.lpc and the integrations loaded already.
    code = ("import sys, lcr.kv, lcr.kv.sim\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('lcr.lpc', 'lcr.integrations', 'sglang')))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"lcr.kv imports upwards: {out.stdout.strip()}"


def test_each_radix_policy_class_has_one_name_and_the_reference_says_it_is_one():
    """No aliases: a class exported by lcr.kv's modules is exported under its own name
    (the radix classes are Radix<NAME>; lcr.policies' LRU, LARU... are the item caches')."""
    import importlib

    from lcr.kv.policies import LeafPolicy

    for module in ("lcr.kv", "lcr.kv.policies", "lcr.kv.laru", "lcr.kv.laru_reference"):
        for attr, value in vars(importlib.import_module(module)).items():
            if isinstance(value, type) and issubclass(value, LeafPolicy):
                assert value.__name__ == attr, f"{module}.{attr} is an alias of {value.__name__}"
    from lcr.kv.laru_reference import ReferenceRadixLARU

    entry = registry.policy("laru-reference")
    assert registry.load(entry.declares[0]) is ReferenceRadixLARU and ReferenceRadixLARU.name == entry.name
    assert "laru-spec" not in registry.POLICIES
    with pytest.raises(ImportError):
        importlib.import_module("lcr.kv.spec")


def test_every_policy_option_the_docs_and_docstrings_name_is_one_the_policy_takes():
    """``NAME:option=value`` in docs/kv.md and the radix modules' docstrings and help, and
    every ``confidence=VALUE``, name what the registry and RadixLARU take today (an option
    removed in its declaration must not live on in an example)."""
    import re
    from pathlib import Path

    import lcr.integrations.sglang_sim  # noqa: F401  (registers SGLang's own strategies)
    import lcr.lpc.sim  # noqa: F401  (registers the LPC policies)
    from lcr.kv.laru import CONFIDENCES

    root = Path(__file__).resolve().parents[1]
    files = [root / "docs/kv.md", root / "docs/lpc.md", *sorted((root / "lcr/kv").glob("*.py")), root / "lcr/lpc/sim.py",
             *sorted((root / "lcr/integrations").glob("sglang*.py")), *sorted((root / "sglang_patch").glob("*.py"))]
    names = "|".join(sorted(map(re.escape, registry.POLICIES), key=len, reverse=True))
    spec = re.compile(rf"(?<![\w-])({names}):((?:\w+=[^;,\s`'\")]*;?)+)")
    stale = []
    for path in files:
        text = path.read_text()
        for match in spec.finditer(text):
            options = [item.partition("=")[0] for item in match.group(2).split(";") if item]
            valid = registry.policy(match.group(1)).options()
            stale += [f"{path.name}: {match.group(0)} ({o})" for o in options if o not in valid]
        stale += [f"{path.name}: confidence={value}" for value in re.findall(r"confidence=(\w+)", text)
                  if value not in CONFIDENCES]
    assert not stale, stale


class RadixMRU(RadixLRU):
    """A policy made for the test: the most recently used leaf, with one option."""

    name = "test-mru"

    def __init__(self, depth: int = 1):
        super().__init__()
        self.depth = depth

    def pick_victim(self, leaves, now):
        return max(leaves, key=lambda k: (self.last_access.get(k, -1), k))


@pytest.fixture
def mru():
    entry = registry.register_policy(registry.RadixPolicy(
        "test-mru", lambda w, pred, seed, **o: RadixMRU(**o), (RadixMRU,), "a test policy",
        serving=registry.Serving(RadixMRU)))
    try:
        yield entry
    finally:
        del registry._POLICIES["test-mru"]


def test_one_registry_entry_reaches_every_consumer(mru, capsys):
    from lcr.kv.sim import POLICIES, RADIX_ENGINES, make_radix_policy

    assert "test-mru" in POLICIES and isinstance(make_radix_policy("test-mru", None, depth=2), RadixMRU)
    assert "lcr" in RADIX_ENGINES
    assert main(["sim-kv", "online_qa:conversations=20", "--cache-tokens", "5%",
                 "--policies", "lru,test-mru:depth=2"]) == 0
    assert "test-mru:depth=2" in capsys.readouterr().out
    # SGLang: an option table and a launcher flag, from the constructor's own parameters
    assert sglang_config.policy_options("test-mru") == ("depth",)
    assert isinstance(sglang_config.build_policy(sglang_config.PolicyConfig.parse("test-mru", {"depth": 3}), 100),
                      RadixMRU)
    out = launcher.translate(["--cache-policy", "test-mru", "--test-mru-depth", "3"])
    assert out == ["--radix-cache-backend", "lcr-test-mru", "--radix-eviction-policy-config", '{"depth": 3}']


@pytest.mark.parametrize("argv, message", [
    (["--policies", "lru,laru:k=4"], "policy 'laru': unknown option 'k'; valid: b, slack, confidence"),
    (["--policies", "lru:b=2"], "policy 'lru': unknown option 'b'; valid: none"),
    (["--policies", "rlt:seed=3"], "policy 'rlt': unknown option 'seed'"),  # --seed seeds it
    (["--policies", "lru", "--engine", "tpu"], "unknown engine 'tpu'; valid: lcr, sglang"),
])
def test_sim_kv_refuses_an_unknown_option_in_one_line(argv, message, capsys):
    assert main(["sim-kv", "online_qa:conversations=10", "--cache-tokens", "1000", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_an_unknown_sglang_option_is_refused():
    with pytest.raises(LcrInputError, match="laru options: unknown k; valid: b, confidence, credit, predictor"):
        sglang_config.PolicyConfig.parse("laru", {"k": 4})
    with pytest.raises(LcrInputError, match="unknown cache policy 'laru-reference'; valid: lru, laru, fpb, hf, rlt, lpc"):
        sglang_config.PolicyConfig.parse("laru-reference", {})  # not served


@pytest.mark.parametrize("argv, message", [
    (["--cache-policy", "laru", "--laru-k", "4"], "unknown flag --laru-k; laru's flags: --laru-b"),
    (["--cache-policy", "laru", "--laru-shrink-every=2"], "unknown flag --laru-shrink-every"),
    (["--cache-policy", "hf", "--rlt-seed", "2"], "--rlt-seed is an option of --cache-policy rlt, not hf"),
    (["--cache-policy", "laru", "--laru-confidence", "earned"], "laru confidence must be one of"),
])
def test_an_unknown_launcher_flag_is_refused_in_one_line(argv, message, capsys):
    assert launcher.main([*argv, "--model-path", "m"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_options_come_from_the_declaration():
    assert registry.policy("hf").options() == ("window",)
    assert registry.policy("rlt").serving.options() == ("seed",)  # whole_leaf is fixed when served
    assert registry.policy("laru-lpc").options()[:3] == ("model", "invert", "scale")
    assert set(registry.policy("laru").options()) <= set(registry.policy("laru-lpc").options())


_NAMES = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["laru", "hf", "rlt", "lpc", "fpb"]), name=_NAMES)
@example(policy="laru", name="conf")  # a prefix of --laru-confidence is no abbreviation of it
def test_any_undeclared_option_is_refused_at_every_entry_naming_it(policy, name):
    from lcr.kv.cli import parse_policies

    declared = registry.policy(policy).serving.options()
    assume(name not in declared and name not in sglang_config.PREDICTOR_OPTIONS)
    if name not in registry.policy(policy).options():
        with pytest.raises(LcrInputError, match=f"policy '{policy}': unknown option '{name}'"):
            parse_policies(f"lru,{policy}:{name}=1")
    with pytest.raises(LcrInputError, match=f"{policy} options: unknown {name};"):
        sglang_config.PolicyConfig.parse(policy, {name: 1})
    flag = f"--{policy}-{name.replace('_', '-')}"
    with pytest.raises(LcrInputError, match=f"unknown flag {flag};"):
        launcher.translate(["--cache-policy", policy, flag, "1", "--model-path", "m"])
