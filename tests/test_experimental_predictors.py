"""The predictors of the experiments: oracle, the paper's noisy oracle, lognormal, constant."""
from __future__ import annotations

import numpy as np
import pytest

from lcr.predict.experimental import lognormal_predictions, oracle_predictions, true_next_times
from lcr.traces import NEVER, generate


def test_oracle_is_the_true_next_request_time():
    trace = generate("loop:requests=10,keys=4")
    expected = [4, 5, 6, 7, 8, 9, np.inf, np.inf, np.inf, np.inf]
    assert oracle_predictions(trace).tolist() == expected
    assert np.array_equal(true_next_times(trace) == np.inf, trace.next_use == NEVER)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_noise_flips_a_share_p_of_predictions_to_their_negative(p):
    trace = generate("zipf:requests=50000,keys=5000,alpha=1.0,seed=0")
    truth, noisy = oracle_predictions(trace), oracle_predictions(trace, p, seed=0)
    flipped = noisy != truth
    assert np.array_equal(noisy[flipped], -truth[flipped])
    assert flipped.mean() == pytest.approx(p, abs=0.01)


def test_noise_is_independent_of_the_workload_for_the_same_seed():
    """Regression: the flip mask once came from the generator's own stream, so with equal
    seeds exactly the requests to the hottest keys were corrupted."""
    trace = generate("zipf:requests=50000,keys=5000,alpha=1.0,seed=0")
    flipped = oracle_predictions(trace, 0.5, seed=0) != oracle_predictions(trace)
    counts = np.bincount(trace.keys)
    hot = counts[trace.keys] >= np.quantile(counts[trace.keys], 0.75)
    assert flipped[hot].mean() == pytest.approx(0.5, abs=0.02)
    assert flipped[~hot].mean() == pytest.approx(0.5, abs=0.02)


def test_lognormal_noise_scales_intervals_and_keeps_never():
    trace = generate("zipf:requests=20000,keys=2000,alpha=0.9,seed=1")
    truth, noisy = oracle_predictions(trace), lognormal_predictions(trace, 0.5, seed=2)
    finite = np.isfinite(truth)
    assert np.array_equal(np.isinf(noisy), ~finite)
    now = np.arange(len(trace))
    ratio = (noisy[finite] - now[finite]) / (truth[finite] - now[finite])
    assert np.median(np.log(ratio)) == pytest.approx(0.0, abs=0.02)
    assert np.std(np.log(ratio)) == pytest.approx(0.5, rel=0.05)
