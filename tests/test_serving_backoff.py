"""The serving path's back-off rule (lcr.predict.backoff), shared by the KV
policies' predictor guard and LPC's request predictor."""
import logging

from lcr.predict.backoff import Backoff


def make():
    return Backoff("predictor p", timeout_s=0.05, backoff_s=10.0, fallback="evicting by LRU")


def test_a_failure_shuts_the_predictor_out_for_backoff_s_from_when_it_failed():
    b = make()
    assert not b.shut(0.0)
    b.failed(now=3.0, elapsed=0.01, why="ConnectionError")
    assert b.shut(3.0) and b.shut(12.999)
    assert not b.shut(13.0)
    assert b.backoffs == 1


def test_only_an_answer_slower_than_the_timeout_backs_off():
    b = make()
    b.answered(now=1.0, elapsed=0.05)  # at the timeout: in time
    assert not b.shut(1.0) and b.backoffs == 0
    b.answered(now=2.0, elapsed=0.0501)
    assert b.shut(2.0) and not b.shut(12.0) and b.backoffs == 1


def test_one_warning_per_outage_and_one_on_recovery(caplog):
    b = make()
    with caplog.at_level(logging.WARNING, "lcr.sglang"):
        b.failed(0.0, 0.2, "TimeoutError")
        b.failed(11.0, 0.2, "TimeoutError")  # the same outage, still failing
        b.answered(22.0, 0.001)
        b.answered(23.0, 0.001)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["lcr: predictor p failed (TimeoutError) (200 ms); evicting by LRU for 10 s",
                        "lcr: predictor p is answering again"]
    assert b.backoffs == 2
