"""The serving cache's predictor options never show a password: the SGLang options line,
the unreachable-service error and the predictor's name, with a live and a dead service."""
from __future__ import annotations

import pytest

from lcr.errors import LcrInputError
from lcr.integrations.serving_predictor import ServiceNodePredictor, check_service_url
from remote_service import Server, free_port, service_app

SECRET = "pw/with?odd#chars"


def test_a_dead_service_is_named_without_its_password():
    url = f"http://user:{SECRET}@127.0.0.1:{free_port()}"
    with pytest.raises(LcrInputError) as err:
        ServiceNodePredictor(url, timeout_s=0.2)
    assert SECRET not in str(err.value) and "pw" not in str(err.value)
    assert "***" in str(err.value) and "\n" not in str(err.value)


def test_a_live_service_with_credentials_is_reached_and_named_without_them():
    with Server(service_app) as server:
        url = f"http://user:{SECRET}@127.0.0.1:{server.port}"
        node = ServiceNodePredictor(url, timeout_s=1.0)  # the /health probe goes through
        try:
            assert SECRET not in node.name and "***" in node.name
            node.observe(1, float("nan"))  # a bad value is the client's to count, not a crash
            assert node.client.metrics["observations_invalid"] == 1
        finally:
            node.client.close()


def test_a_bad_url_error_hides_the_password():
    for url in (f"https://u:{SECRET}@host:1", f"http://u:{SECRET}@host:port"):
        with pytest.raises(LcrInputError) as err:
            check_service_url(url)
        assert SECRET not in str(err.value)


def test_the_sglang_options_line_hides_the_password():
    from lcr.integrations.sglang_config import PolicyConfig

    config = PolicyConfig.parse("laru", {"predictor_url": f"http://u:{SECRET}@127.0.0.1:9"})
    assert SECRET not in config.describe() and "***" in config.describe()
