"""``--predictor`` is parsed once, at the edge, into ``lcr.predict.PredictorSpec``; below
the edge only that object travels (lcr.sim and lcr.predict never re-read the name).
Run time: about 10 s (hypothesis: 300 + 300 examples)."""
from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lcr.cli import main
from lcr.errors import LcrInputError
from lcr.predict import EXPERIMENT_PREDICTORS, LEARNED_PREDICTORS, LEARNED_OPTIONS, PredictorSpec

KINDS = (*EXPERIMENT_PREDICTORS, *LEARNED_PREDICTORS)


@st.composite
def spec_texts(draw):
    """A valid ``--predictor`` value, loosely spaced, and the spec it means."""
    kind = draw(st.sampled_from(KINDS))
    mode = draw(st.sampled_from((None, "sync", "async")))
    names = draw(st.permutations(LEARNED_OPTIONS)) if kind in LEARNED_PREDICTORS else []
    options = tuple((name, draw(st.integers(1, 10**9))) for name in names[:draw(st.integers(0, len(names)))])
    items = ([mode] if mode else []) + [f"{name}={value}" for name, value in options]
    items = draw(st.permutations(items))
    spaced = [draw(st.sampled_from(("", " "))) + item + draw(st.sampled_from(("", " "))) for item in items]
    text = kind + (":" + ";".join(spaced) if items or draw(st.booleans()) else "")
    order = tuple(item for item in items if "=" in item)
    return text, PredictorSpec(kind, mode, tuple((o.partition("=")[0], int(o.partition("=")[2])) for o in order))


@settings(max_examples=300, deadline=None)
@given(spec_texts())
def test_a_name_parses_into_its_spec_and_the_spec_prints_a_name_that_parses_back(case):
    text, expected = case
    spec = PredictorSpec.parse(text)
    assert spec == expected
    assert PredictorSpec.parse(str(spec)) == spec
    assert PredictorSpec.parse(spec) is spec  # a spec passes through: nothing is parsed again


@settings(max_examples=300, deadline=None)
@given(st.text(string.ascii_lowercase + string.digits + ":;=- _", max_size=40))
def test_any_other_text_is_one_line_naming_it(text):
    try:
        spec = PredictorSpec.parse(text)
    except LcrInputError as err:
        assert "\n" not in str(err) and f"predictor {text!r}" in str(err)
    else:
        assert spec.kind in KINDS


def test_what_a_spec_says():
    assert PredictorSpec.parse("lightgbm:window=80000").learned
    assert not PredictorSpec.parse("lightgbm").has_array  # the sync model answers during the replay
    assert PredictorSpec.parse("lightgbm:async").has_array and PredictorSpec.parse("oracle").has_array
    assert str(PredictorSpec.parse("lightgbm-weak:sync; window=9 ")) == "lightgbm-weak:sync;window=9"
    with pytest.raises(TypeError, match="predictor"):
        PredictorSpec.parse(3)


@pytest.mark.parametrize("predictor, engine, replayed", [
    ("oracle", "auto", "oracle"), ("lightgbm", "auto", "lightgbm:async"),
    ("lightgbm:sync", "python", "lightgbm:sync"),
    ("lightgbm-compact:window=3000", "native", "lightgbm-compact:async;window=3000")])
def test_lcr_sim_parses_the_predictor_name_once(monkeypatch, capsys, predictor, engine, replayed):
    parsed = []
    real = PredictorSpec.parse.__func__

    def counting(cls, value):
        if isinstance(value, str):
            parsed.append(value)
        return real(cls, value)

    monkeypatch.setattr(PredictorSpec, "parse", classmethod(counting))
    assert main(["sim", "zipf:requests=4000,keys=400", "--cache", "2%,5%", "--policies", "lru,laru,fpb",
                 "--predictor", predictor, "--engine", engine, "--prediction-cache", "off"]) == 0
    assert parsed == [predictor]
    summary = capsys.readouterr().out.splitlines()[0]
    assert summary.split("; predictor ")[1].split(" (")[0] == replayed
