"""Bad flags and inputs of serve-predictor, bench sls, sim-ckpt and predict-eval: one line, exit 2, up front."""
from __future__ import annotations

import pytest

from lcr.cli import main

BINARY = bytes(range(256)) * 16

CASES = [
    # serve-predictor (all refused before uvicorn starts)
    (["serve-predictor", "--window", "1"], "--window must be at least 2"),
    (["serve-predictor", "--retrain-every", "0"], "--retrain-every must be at least 1"),
    (["serve-predictor", "--port", "70000"], "is not a TCP port"),
    (["serve-predictor", "--max-body-mb", "nan"], "--max-body-mb must lie in"),
    (["serve-predictor", "--max-body-mb", "1e9"], "--max-body-mb must lie in"),
    (["serve-predictor", "--max-keys", "0"], "--max-keys must be at least 1"),
    (["serve-predictor", "--max-queued", "0"], "--max-queued must be at least 1"),
    (["serve-predictor", "--header-timeout", "0"], "--header-timeout must be a positive"),
    (["serve-predictor", "--body-timeout", "inf"], "--body-timeout must be a positive"),
    (["serve-predictor", "--ssl-certfile", "cert.pem"], "go together"),
    (["serve-predictor", "--ssl-certfile", "/nonexistent.pem", "--ssl-keyfile", "/nonexistent.key"], "no such file"),
    # bench sls
    (["bench", "sls", "--batches", "0"], "--batches must be at least 1"),
    (["bench", "sls", "--warmup", "-1"], "--warmup must be at least 0"),
    (["bench", "sls", "--cache-ratio", "1e6"], "not a fraction"),
    (["bench", "sls", "--cache-ratio", "0"], "not a fraction"),
    (["bench", "sls", "--cache-ratio", "nan"], "not a fraction"),
    (["bench", "sls", "--batch-sizes", "0"], "--batch-sizes must be at least 1"),
    (["bench", "sls", "--batch-sizes", ","], "give at least one value"),
    (["bench", "sls", "--table-rows", "0"], "--table-rows must be at least 1"),
    (["bench", "sls", "--dim", "0"], "--dim must be at least 1"),
    (["bench", "sls", "--pooling", "0"], "--pooling must be at least 1"),
    (["bench", "sls", "--seed", "-1"], "--seed must be at least 0"),
    (["bench", "sls", "--table-rows", "100000000000"], "GiB of memory is available"),
    (["bench", "sls", "--policies", ""], "give at least one value"),
    (["bench", "sls", "--policies", "lru,nope"], "--policies: unknown"),
    (["bench", "sls", "--predictor", "noisy:2"], "noisy:P needs 0 <= P <= 1"),
    (["bench", "sls", "--json", "{file}/out.json"], "is not a directory"),
    (["bench", "sls", "--plot", "{dir}"], "is a directory"),
    (["bench", "sls", "--store", "ftp://user:hunter2@host/x", "--table-rows", "10", "--batch-sizes", "2",
      "--pooling", "2", "--batches", "1", "--warmup", "0"], "valid: host or a redis URL"),
    # sim-ckpt
    (["sim-ckpt", "{file}"], "not UTF-8 text"),
    (["sim-ckpt", "uniform", "--budgets", "1,2,...,100000000000"], "more than 4096 budgets"),
    (["sim-ckpt", "uniform", "--budgets", ","], "cannot read"),
    (["sim-ckpt", "uniform", "--budgets", "0"], "must be >= 1"),
    (["sim-ckpt", "uniform", "--budgets", "abc"], "is not an integer"),
    (["sim-ckpt", "uniform", "--json", "{file}/out.json"], "is not a directory"),
    (["sim-ckpt", "uniform", "--plot", "{dir}"], "is a directory"),
    (["sim-ckpt", "uniform", "--decay", "0"], "--decay must lie in"),
    (["sim-ckpt", "uniform", "--refresh-every", "0"], "--refresh-every must be at least 1"),
    (["sim-ckpt", "uniform", "--cache-entries", "0"], "--cache-entries must be at least 1"),
    (["sim-ckpt", "uniform", "--block-interval", "0"], "--block-interval must be at least 1"),
    (["sim-ckpt", "uniform", "--seed", "-1"], "--seed must be at least 0"),
    # predict-eval (refused before the trace is read)
    (["predict-eval", "zipf:requests=5000,keys=500", "--samples", "0"], "--samples must be at least 1"),
    (["predict-eval", "zipf:requests=5000,keys=500", "--limit", "0"], "--limit must be at least 1"),
    (["predict-eval", "zipf:requests=5000,keys=500", "--plot", "{dir}"], "is a directory"),
    (["predict-eval", "zipf:requests=5000,keys=500", "--plot", "{dir}/cal.txt"], "ending in .png"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(BINARY)
    argv = [a.format(file=binary, dir=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"lcr {argv[0]}: error: ") and message in err, err
    assert "hunter2" not in err


@pytest.mark.parametrize("url, shown", [
    ("redis://:hunter2@host:6379/0", "redis://:***@host:6379/0"),
    ("redis://alice:hunter2@host:6379/0", "redis://alice:***@host:6379/0"),
    ("redis://hunter2@host/0", "redis://:***@host/0"),
    ("unix:///tmp/r.sock?db=1&password=hunter2", "unix:///tmp/r.sock?db=1&password=***"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("host", "host"),  # a bare name (bench sls --store host) is shown as given, not ":host"
    ("/tmp/x?password=hunter2", "/tmp/x?password=***"),
])
def test_redact_url_hides_every_password_form(url, shown):
    from lcr.redact import redact_url, url_secrets

    assert redact_url(url) == shown
    assert ("hunter2" in url_secrets(url)) == ("hunter2" in url)
