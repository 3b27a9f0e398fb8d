"""The SGLang launcher's flag translation and the backend options (no SGLang needed)."""
from __future__ import annotations

import json

import pytest

from lcr.errors import LcrInputError
from lcr.integrations.sglang_config import PolicyConfig, build_policy
from lcr.kv.policies import RadixHF, RadixLARU, RadixRLT
from sglang_patch.launch_server import main, translate


def test_lru_is_stock_sglang_untouched():
    args = ["--model-path", "m", "--port", "30000"]
    assert translate(["--cache-policy", "lru", *args]) == args
    assert translate(args) == args


def test_laru_selects_the_backend_and_passes_its_options_as_json():
    out = translate(["--cache-policy", "laru", "--laru-b", "4", "--model-path", "m"])
    assert out[:2] == ["--model-path", "m"]
    assert out[2:4] == ["--radix-cache-backend", "lcr-laru"]
    assert out[4] == "--radix-eviction-policy-config"
    assert json.loads(out[5]) == {"b": 4.0}


@pytest.mark.parametrize("policy", ["fpb", "hf", "rlt"])
def test_every_policy_has_a_backend(policy):
    assert translate(["--cache-policy", policy])[:2] == ["--radix-cache-backend", f"lcr-{policy}"]


def test_unknown_policy_lists_the_valid_ones(capsys):
    assert main(["--cache-policy", "belady", "--model-path", "m"]) == 2
    err = capsys.readouterr().err
    assert "unknown --cache-policy 'belady'; valid: lru, laru, fpb, hf, rlt" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--cache-policy", "lru", "--laru-b", "2"], "stock SGLang"),
    (["--cache-policy", "rlt", "--laru-b", "2"], "--laru-b is an option of --cache-policy laru, not rlt"),
    (["--cache-policy", "laru", "--radix-cache-backend", "x"], "sets --radix-cache-backend itself"),
    (["--cache-policy", "laru", "--predictor-url", "http://127.0.0.1:9/predict"], "is unreachable"),
])
def test_bad_launcher_input_is_one_line(argv, message):
    with pytest.raises(LcrInputError, match=message):
        translate(argv)


def test_options_json_is_validated():
    with pytest.raises(LcrInputError, match="malformed JSON"):
        PolicyConfig.parse("laru", "{b: 2")
    with pytest.raises(LcrInputError, match="expected a JSON object"):
        PolicyConfig.parse("laru", "[1]")
    with pytest.raises(LcrInputError, match="unknown predictor 'magic'"):
        PolicyConfig.parse("laru", {"predictor": "magic"})
    with pytest.raises(LcrInputError, match="unknown cache policy 'mru'"):
        PolicyConfig.parse("mru", {})


def test_options_build_the_policy():
    laru = build_policy(PolicyConfig.parse("laru", '{"b": 4, "confidence": "balance"}'), 10_000)
    assert isinstance(laru, RadixLARU) and laru.b == 4 and laru.confidence == "balance"
    assert isinstance(build_policy(PolicyConfig.parse("hf", {"window": 8}), 10_000), RadixHF)
    assert isinstance(build_policy(PolicyConfig.parse("rlt", None), 10_000), RadixRLT)


@pytest.mark.parametrize("flags, message", [
    (["--laru-b", "0.5"], "laru option b (LARU's lambda divisor) must be > 1, got 0.5"),
    (["--laru-b", "1"], "must be > 1, got 1"),
    (["--laru-b", "x"], "argument --laru-b: invalid float value: 'x'"),
    (["--laru-credit", "2"], "laru option credit (LARU's window grows back on requests that beat LRU) must be 0 or 1"),
    (["--laru-credit", "yes"], "argument --laru-credit: invalid int value: 'yes'"),
    (["--predictor-timeout-ms", "-5"], "predictor_timeout_ms (predictor timeout) must be > 0, got -5"),
    (["--predictor-timeout-ms", "nan"], "must be a finite number"),
    (["--predictor-backoff-s", "-1"], "predictor_backoff_s"),
    (["--predictor-budget-ms", "0"], "predictor_budget_ms (predictor time per eviction pass) must be > 0"),
    (["--predictor", "oracle"], "argument --predictor: invalid choice: 'oracle'"),
    (["--predictor", "intervals", "--predictor-url", "http://127.0.0.1:9"], "predictor or predictor_url, not both"),
    (["--predictor-url", "127.0.0.1:9"], "predictor_url must look like http://host:port"),
])
def test_every_launcher_option_is_checked_at_launch(flags, message, capsys):
    assert main(["--cache-policy", "laru", *flags, "--model-path", "m"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("policy, flags, message", [
    ("hf", ["--hf-window", "0"], "hf option window (HF's candidate window) must be >= 1, got 0"),
    ("rlt", ["--rlt-seed", "-1"], "rlt option seed (RLT's seed) must be >= 0"),
])
def test_other_policies_options_are_checked_at_launch(policy, flags, message, capsys):
    assert main(["--cache-policy", policy, *flags]) == 2
    assert message in capsys.readouterr().err


def test_backend_config_json_gets_the_same_checks():
    with pytest.raises(LcrInputError, match="laru option b .* must be > 1"):
        PolicyConfig.parse("laru", '{"b": 0.5}')
    with pytest.raises(LcrInputError, match="laru option credit .* must be 0 or 1, got 2"):
        PolicyConfig.parse("laru", '{"credit": 2}')
    with pytest.raises(LcrInputError, match="hf option window .* must be an integer, got '4'"):
        PolicyConfig.parse("hf", '{"window": "4"}')


# --predictor-noise: the live robustness benchmark's negated predictions (issue 36) -----------
def test_predictor_noise_reaches_the_backend_config():
    out = translate(["--cache-policy", "laru", "--predictor", "lightgbm", "--predictor-noise", "0.5"])
    assert json.loads(out[-1]) == {"predictor": "lightgbm", "predictor_noise": 0.5}


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "inf"])
def test_predictor_noise_outside_0_1_is_refused_in_one_line(value, capsys):
    assert main(["--cache-policy", "laru", "--predictor-noise", value, "--model-path", "m"]) == 2
    err = capsys.readouterr().err
    assert "predictor_noise" in err and "[0, 1]" in err and err.count("\n") == 1, err
    with pytest.raises(LcrInputError, match=r"laru option predictor_noise .* must be a probability in \[0, 1\]"):
        PolicyConfig.parse("laru", {"predictor_noise": float(value)})


def served_ranking(noise, keys=tuple(range(1, 9)), now=20):
    """The ranks a served LARU (recent intervals) puts on ``keys`` at ``now``, after every
    key was accessed at 0 and key k again at k: predicted back at 2k, so the smaller k
    ranks first."""
    policy = build_policy(PolicyConfig.parse("laru", {"predictor": "intervals", "predictor_noise": noise}), 10_000)
    for t in range(now):
        accessed = [k for k in keys if t in (0, k)]
        policy.on_access(accessed, t, [10 * k for k in accessed])
    assert policy.predict(list(keys), now)
    return [policy.table.rank(k) for k in keys]


def test_predictor_noise_one_reverses_the_ranking_the_policy_sees_and_zero_keeps_it():
    truth = served_ranking(0.0)
    assert truth == sorted(truth) and len(set(truth)) == len(truth)  # the truth: k orders them
    assert served_ranking(1.0) == [-r for r in truth]  # every key ranked the opposite way
    half = served_ranking(0.5)
    assert half == served_ranking(0.5) and {abs(r) for r in half} == set(truth)  # seeded
    assert 0 < sum(r < 0 for r in half) < len(half)
