"""The link from each spec policy to its C++ core: named arguments, none dropped, none ignored.

For every policy with a native core (its spec class defines ``native_args``):
- the core's arguments, as pybind11 writes them into its signature, are exactly those
  ``lcr.sim.native.core_args`` passes (a ``py::arg`` dropped or renamed fails here);
- every decision option of the spec constructor reaches the core: changing it from its
  default changes ``native_args()`` (a new option the core is not given fails here), and
  tests/test_native_engine.py's VARIANTS vary it (core = spec decision by decision);
- an unknown option is refused by both engines of ``lcr sim`` on one line naming it.

Runs in ~2 s (no fuzzing: the cases are the registry's).
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from lcr import _native
from lcr.cli import main
from lcr.policies import POLICIES
from lcr.sim.native import NATIVE_POLICIES, core_args, native_replay, native_spec
from lcr.traces import Trace

#: Constructor parameters that are not options of a core, and why.
NOT_OPTIONS = {
    "capacity": "an engine input every core takes",
    "predictor": "the engine hands the core the prediction array (predictions) instead",
    "next_use": "the engine hands the core the trace's next uses",
    "record": "laru's container for its record of prediction-evicted keys (SlabHash's "
              "bitset); the core keeps an exact record and native_args refuses any other",
}
#: A value other than the default, where the default does not tell the option's type.
OTHER_VALUE = {"mode": "async", "guard": 0.01}
CAPACITY = 1000  # large enough that every ratio option moves its size
NATIVE = sorted(NATIVE_POLICIES)


def core_params(name: str) -> list[str]:
    """The argument names of ``_native.replay_<name>``, from pybind11's signature line."""
    signature = getattr(_native, f"replay_{name}").__doc__.splitlines()[0]
    return re.findall(r"(?:\(|, )(\w+): ", signature)


def options(name: str) -> dict[str, object]:
    """The spec constructor's decision options and their defaults."""
    params = inspect.signature(POLICIES[name]).parameters
    return {p: params[p].default for p in params if p not in NOT_OPTIONS}


def other_value(option: str, default):
    if option in OTHER_VALUE:
        return OTHER_VALUE[option]
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default * 2 if default else 1
    raise AssertionError(f"option {option!r} (default {default!r}): add a non-default value to OTHER_VALUE")


def test_native_policies_are_exactly_the_cores():
    cores = {name.removeprefix("replay_") for name in dir(_native) if name.startswith("replay_")}
    assert NATIVE_POLICIES == cores, "a core without a spec class defining native_args, or the reverse"
    assert "laru_llru" not in NATIVE_POLICIES  # a subclass changes the rule: it never inherits a core


@pytest.mark.parametrize("name", NATIVE)
def test_core_takes_exactly_what_the_engine_passes(name):
    trace = Trace(np.array([1, 2, 1, 3], dtype=np.int64))
    passed = core_args(native_spec(name, CAPACITY), trace, np.zeros(len(trace)), record_evictions=True)
    taken = core_params(name)
    assert taken[0] == "ids", taken  # the signature parsed
    assert sorted(passed) == sorted(taken), f"replay_{name} takes {taken}, the engine passes {sorted(passed)}"


@pytest.mark.parametrize("name", NATIVE)
def test_every_spec_option_reaches_the_core(name):
    default = native_spec(name, CAPACITY).native_args()
    for option, value in options(name).items():
        assert value is not inspect.Parameter.empty, f"{name} option {option!r} has no default"
        changed = native_spec(name, CAPACITY, **{option: other_value(option, value)}).native_args()
        assert changed != default, f"{name} option {option!r} changes nothing its native core is given"


@pytest.mark.parametrize("name", NATIVE)
def test_every_spec_option_is_checked_decision_by_decision(name):
    from test_native_engine import VARIANTS  # core = spec at every request, per variant

    varied = {option for policy, params in VARIANTS if policy == name for option in params}
    assert any(policy == name for policy, _ in VARIANTS), f"{name}: no variant in test_native_engine.VARIANTS"
    missing = set(options(name)) - varied
    assert not missing, f"{name} options {sorted(missing)}: vary them in test_native_engine.VARIANTS"


def test_an_engine_only_record_is_refused_not_ignored():
    class Record(set):
        pass

    with pytest.raises(ValueError, match="laru record: the native core keeps its own"):
        native_replay(Trace(np.arange(4, dtype=np.int64)), "laru", 2, np.zeros(4), record=Record())


@pytest.mark.parametrize("name", NATIVE)
def test_native_replay_refuses_an_unknown_option(name):
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        native_replay(Trace(np.arange(4, dtype=np.int64)), name, 2, np.zeros(4), bogus=1)


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("name", ["laru", "lru", "s3fifo"])
def test_lcr_sim_refuses_an_unknown_option_on_one_line(capsys, engine, name):
    code = main(["sim", "loop:requests=100,keys=10", "--cache", "4", "--policies", f"{name}:bogus=1",
                 "--engine", engine])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "unexpected keyword argument 'bogus'" in err and len(err.splitlines()) == 1, err
