"""The slab policy registry (lcr.embedding.slab_policies) against every engine and consumer.

The engines number their policies in a C++ enum (LCR_SLAB_POLICIES, csrc/common/slab_table.h)
and export it by name; these tests fail when an engine built here disagrees with the
registry, when a consumer keeps its own list, or when an option stops reaching the engines.
Run time: about 15 s on 2 shared cores, most of it the warp model replaying hf:window
(no fuzzing).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lcr import _native  # noqa: E402
from lcr.cli import build_parser, main  # noqa: E402
from lcr.embedding.cache import SlabHashCache, _Engine  # noqa: E402
from lcr.embedding.reference import SlabsetReference  # noqa: E402
from lcr.embedding.slab_policies import SLAB_POLICIES, describe_slab_policies, parse_slab_policy  # noqa: E402

from test_slabhash_cache import keys_in_slabset, next_batch_times, noisy  # noqa: E402


def engine_modules():
    """Every engine module built here: the CPU engine, the warp model and, when nvcc
    built it, lcr._cuda (its enum is compiled in; no GPU is needed to read it)."""
    modules = [("native", _native), ("warp-model", _native.warp_model)]
    try:
        from lcr import _cuda
    except ImportError:
        pass
    else:
        modules.append(("cuda", _cuda))
    return modules


@pytest.mark.parametrize("kind,module", engine_modules(), ids=[kind for kind, _ in engine_modules()])
def test_every_engine_numbers_the_slab_policies_as_the_registry(kind, module):
    registry = {name: policy.engine_id for name, policy in SLAB_POLICIES.items()}
    assert module.slab_policy_ids() == registry


def test_the_registry_ids_are_the_enum_order():
    # The enum counts up from 0 (kSlabPolicyCount bounds a table's id): no gaps, no repeats.
    assert sorted(p.engine_id for p in SLAB_POLICIES.values()) == list(range(len(SLAB_POLICIES)))


def test_a_cache_refuses_an_engine_that_numbers_its_policy_otherwise():
    lru = parse_slab_policy("lru")
    renumbered = dataclasses.replace(lru, policy=dataclasses.replace(lru.policy, engine_id=1))
    with pytest.raises(RuntimeError, match="'lru' is 1 in the registry but lcr._native numbers it 0"):
        _Engine("native", torch.device("cpu")).check_policy(renumbered)
    unknown = dataclasses.replace(lru, policy=dataclasses.replace(lru.policy, name="clock"))
    with pytest.raises(RuntimeError, match="lacks it"):
        _Engine("warp-model", torch.device("cpu")).check_policy(unknown)


@pytest.mark.parametrize("text,problem", [
    ("opt", f"unknown slab policy 'opt'; valid: {describe_slab_policies()}"),
    ("lru:window=2", "slab policy lru: unknown option 'window'; it takes none"),
    ("hf:size=2", "slab policy hf: unknown option 'size'; valid: window"),
    ("hf:window=0", "slab policy hf: window must be a whole number >= 1, got '0'"),
    ("hf:window=x", "slab policy hf: window must be a whole number >= 1, got 'x'"),
    ("hf:window", "slab policy hf: window must be a whole number >= 1, got ''"),
])
def test_unknown_policies_and_options_are_refused_in_one_line_everywhere(text, problem, capsys):
    for build in (lambda: SlabHashCache(1, 2, policy=text), lambda: SlabsetReference(1, text)):
        with pytest.raises(ValueError) as err:
            build()
        assert str(err.value) == problem
    assert main(["bench", "sls", "--policies", f"lru,{text}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"lcr bench: error: --policies: {problem}"]


def test_the_list_of_valid_policies_is_the_registry_with_its_options():
    assert describe_slab_policies().split(", ")[:5] == ["lru", "fpb", "hf:window=4", "laru", "lfu"]
    assert len(describe_slab_policies().split(", ")) == len(SLAB_POLICIES)


def test_choices_print_as_their_name_plus_the_options_changed():
    assert [str(parse_slab_policy(t)) for t in ("hf", "hf:window=4", "hf: window = 8 ", "laru")] == \
        ["hf", "hf", "hf:window=8", "laru"]


def test_bench_sls_runs_the_registry_by_default_and_predicts_only_for_predictive_policies():
    assert build_parser().parse_args(["bench", "sls"]).policies == ",".join(SLAB_POLICIES)
    assert {p.name for p in SLAB_POLICIES.values() if p.predictive} == {"fpb", "hf", "laru"}


def replay_window(window: int, engine: str) -> list:
    """One slabset under hf:window=W with noisy predictions: every decision, the
    engine's checked against the reference's."""
    policy = f"hf:window={window}"
    rng = np.random.default_rng(5)
    batches = [rng.choice(keys_in_slabset(0, 1, 120), size=24) for _ in range(40)]
    reference = SlabsetReference(1, policy)
    cache = SlabHashCache(1, dim=2, policy=policy, engine=engine)
    decisions = []
    for batch, times in zip(batches, next_batch_times(batches)):
        expected = reference.access(batch)
        got = cache.access(batch)
        assert (got.outcome.tolist(), got.evicted.tolist()) == (expected.outcome, expected.evicted)
        decisions.append(expected.evicted)
        values = noisy(times, 0.3, rng)
        reference.set_predictions(batch, values)
        cache.set_predictions(batch, values)
    return decisions


@pytest.mark.parametrize("engine", ["native", "warp-model"])
def test_an_option_reaches_the_engines(engine):
    # A window of 16 decides otherwise than the default 4, and every engine follows it.
    assert replay_window(16, engine) != replay_window(4, engine)
