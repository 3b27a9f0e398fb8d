"""benchmarks/sglang_ttft.py: what it times, the runs it plans, resuming, bad flags.

The timing tests serve a real HTTP stream (a first chunk after FIRST seconds, the rest
REST seconds later) so that a TTFT taken from any other moment than the request's own
send (the loop's start, the previous request's first token or end) falls outside the
bound. About 4 s.
"""
from __future__ import annotations

import gc
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sglang_ttft as bench  # noqa: E402

FIRST, REST = 0.15, 0.3


class _Stream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(FIRST)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"text": "a", "meta_info": {}}\n\n')
        self.wfile.flush()
        time.sleep(REST)
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def stream_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _from_own_send(ttfts):
    # any other start lies at least FIRST + REST away; FIRST + REST / 2 leaves room for a slow host
    return all(FIRST <= t < FIRST + REST / 2 for t in ttfts)


def test_closed_loop_times_each_request_from_its_own_send(stream_url):
    run = bench.closed_loop(stream_url, [[1, 2]] * 3, concurrency=1)
    assert len(run["ttfts"]) == 3 and _from_own_send(run["ttfts"]), run["ttfts"]
    assert run["wall_s"] >= 3 * (FIRST + REST)  # one client: one request at a time


def test_open_loop_times_each_request_from_its_own_send(stream_url):
    run = bench.open_loop(stream_url, [[1, 2]] * 4, rate=40.0, seed=0)
    assert len(run["ttfts"]) == 4 and _from_own_send(run["ttfts"]), run["ttfts"]
    assert run["wall_s"] < 4 * (FIRST + REST)  # arrivals overlap: not one at a time
    assert run["late_p99_ms"] < 50


def test_a_run_freezes_the_collector_in_server_and_client_before_its_first_request(stream_url, monkeypatch):
    # A full collection over SGLang's imports and model (~0.5 s here) stalls every request
    # in flight: the ~15 slowest of a run, its P99. Frozen before the load, none lands in it.
    events = []

    class Server:
        url = stream_url

        def flush_cache(self):
            events.append("flush")

        def freeze_gc(self):
            events.append("freeze")

        def metrics(self):
            return {}

    monkeypatch.setattr(bench, "timed_request", lambda url, ids: events.append(("send", gc.get_freeze_count() > 0)) or 0.1)
    gc.unfreeze()
    try:
        run = bench.measure(Server(), [[1], [2]], bench.Cell("grid", "online_qa", 0.05, "c1", "lru", 0), None, seed=0)
    finally:
        gc.unfreeze()
    assert events == ["flush", "freeze", ("send", True), ("send", True)]
    assert run["ttfts_ms"] == [100, 100]


def test_the_pooled_p99_ranks_every_repeats_requests_together():
    # LRU stalls 10 requests by 500 ms in two of three repeats, LARU 10 by 150 ms in each:
    # per repeat LARU's P99 is 0.3, 0.3 and 1.5x LRU's (median 0.3); pooled, the 30th
    # slowest of 3,000 requests is LRU's 100 ms and LARU's 150.
    def run(slow_ms):
        return {"cached_ratio": 0.1, "ttft_p99_ms": float(slow_ms), "ttfts_ms": [100] * 990 + [slow_ms] * 10}

    runs = {}
    for repeat, lru_slow in enumerate((500, 500, 100)):
        runs[f"grid|online_qa|0.05|c10|lru|{repeat}"] = run(lru_slow)
        runs[f"grid|online_qa|0.05|c10|laru|{repeat}"] = run(150)
    cell = ("grid", "online_qa", "0.05", "c10", "laru")
    assert bench.pooled_p99_ratio(bench.by_cell(runs), cell) == pytest.approx(1.5)
    assert bench.summary(runs).splitlines()[-1].endswith("0.100 / **0.30** (pooled 1.50) |")
    del runs["grid|online_qa|0.05|c10|lru|2"]["ttfts_ms"]  # a run from before they were kept
    assert bench.pooled_p99_ratio(bench.by_cell(runs), cell) is None


def test_the_fault_fires_once_when_half_the_requests_are_sent():
    calls, sent = [], []
    original = bench.timed_request
    bench.timed_request = lambda url, ids: sent.append(ids[0]) or 0.0
    try:
        send = bench._halfway(lambda: calls.append(len(sent)), total=10)
        for i in range(10):
            send("u", [i])
    finally:
        bench.timed_request = original
    assert calls == [4]  # before the 5th request goes out


def test_plan_interleaves_repeats_and_reverses_the_order_every_other_one():
    cells = bench.plan_cells(["grid"], ["lru", "slru", "laru"], "slru", 2, [0.8])
    assert len(cells) == len({c.key for c in cells}) == 3 * 2 * 2 * 3
    first = [c.policy for c in cells if c.pool == 0.025 and c.load == "c10" and c.repeat == 0]
    second = [c.policy for c in cells if c.pool == 0.025 and c.load == "c10" and c.repeat == 1]
    assert first == ["lru", "slru", "laru"] and second == first[::-1]
    # every run of repeat 0 of a pool comes before any of repeat 1
    pool = [c.repeat for c in cells if c.pool == 0.025]
    assert pool == sorted(pool)


def test_confirming_runs_measure_lru_closed_loop_before_the_open_loop_runs():
    cells = bench.plan_cells(["confirm"], list(bench.POLICIES), "tlru", 1, [0.7, 0.9])
    for workload in ("aibrix", "mooncake", "chat"):
        mine = [c for c in cells if c.workload == workload]
        assert [c.load for c in mine][0] == "c10" and mine[0].policy == "lru"
        assert {c.load for c in mine} == {"c10", "o0.7", "o0.9"}
        assert {c.policy for c in mine} == {"lru", "laru", "tlru"} | ({"lpc"} if workload == "chat" else set())


def test_the_grid_runs_only_the_pools_named():
    cells = bench.plan_cells(["grid"], ["lru", "laru"], "slru", 1, [0.8], grid_pools=[0.025])
    assert {c.pool for c in cells} == {0.025} and len(cells) == 4
    assert {c.pool for c in bench.plan_cells(["grid"], ["lru"], "slru", 1, [0.8])} == set(bench.GRID_POOLS)


def test_the_confirming_plan_runs_only_the_workloads_named():
    cells = bench.plan_cells(["confirm"], list(bench.POLICIES), "tlru", 1, [0.8], ["chat"])
    assert {c.workload for c in cells} == {"chat"} and "lpc" in {c.policy for c in cells}


def test_robustness_runs_negate_predictions_and_kill_the_service():
    cells = bench.plan_cells(["robust"], ["lru"], "slru", 1, [0.8])
    assert [c.policy for c in cells] == ["lru", "laru~0.5", "laru~1", "laru-service", "laru-service!kill"]
    assert bench.server_args("laru~0.5", None) == ("laru", ("--predictor-noise", "0.5"))
    assert bench.server_args("laru-service!kill", "http://x") == ("laru", ("--predictor-url", "http://x"))
    assert bench.server_args("slru", None) == ("lru", ("--radix-eviction-policy", "slru"))
    name, flags = bench.server_args("tlru", None, {"threshold": 8, "next_prompt_estimate": 4})
    assert name == "lru" and flags[:2] == ("--radix-eviction-policy", "tlru")
    assert json.loads(flags[3]) == {"threshold": 8, "next_prompt_estimate": 4}


def test_tlru_gets_token_counts_sglang_accepts():
    """SGLang refuses T-LRU unless threshold > next_prompt_estimate: the estimate is the
    mean tokens a prompt adds to a cache that forgot nothing, the threshold twice that."""
    prompts = [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [1, 2, 9], [7]]
    assert bench.new_tokens(prompts) == [4, 2, 1, 1]
    assert bench.tlru_config(prompts) == {"threshold": 4, "next_prompt_estimate": 2}


def test_online_qa_runs_a_window_of_the_papers_trace_with_the_pool_sized_on_all_of_it():
    served, sizing = bench.run_prompts("online_qa", 1000, 1 / 32)
    assert len(served) == 1000 and served == sizing[:1000] and 7000 < len(sizing) < 7400
    assert bench.pool_size(0.025, sizing) > 5 * bench.pool_size(0.025, served)
    served, sizing = bench.run_prompts("aibrix", 500, 1 / 32)
    assert served is sizing


def test_equal_prefixes_become_equal_token_ids():
    from lcr.kv.requests import BlockRequest, BlockWorkload

    workload = BlockWorkload([BlockRequest((0, 1), (64, 64)), BlockRequest((0, 2), (64, 32)),
                              BlockRequest((3,), (64,))])
    a, b, c = bench.workload_prompts(workload, 1 / 32)
    assert a[:3] == b[:3] and a[3:] != b[3:] and a[1:3] != c[1:3]
    assert [len(a), len(b), len(c)] == [5, 4, 3]
    assert bench.distinct_tokens([a, b, c]) == len(a) + 1 + 2  # b shares bos + block 0


def test_a_rerun_skips_finished_runs_and_refuses_other_settings(tmp_path, capsys):
    out = tmp_path / "r.json"
    cell = bench.Cell("grid", "online_qa", 0.05, "c10", "lru", 0)
    bench.Results(out, {"model": "small"}, fresh=False).add(cell, {"ttft_p99_ms": 1.0})
    assert cell in bench.Results(out, {"model": "small"}, fresh=False)
    assert cell not in bench.Results(out, {"model": "small"}, fresh=True)
    with pytest.raises(SystemExit) as err:
        bench.Results(out, {"model": "tiny"}, fresh=False)
    assert err.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert json.loads(out.read_text())["runs"][cell.key] == {"ttft_p99_ms": 1.0}


@pytest.mark.parametrize("argv, flag", [
    (["--plans", "grid,nope"], "--plans"), (["--policies", "lru,mru"], "--policies"),
    (["--builtin", "laru"], "--builtin"), (["--requests", "0"], "--requests"),
    (["--token-scale", "0"], "--token-scale"), (["--open-loads", "0.5,x"], "--open-loads"),
    (["--open-loads", "-1"], "--open-loads"), (["--repeats", "x"], "--repeats"),
    (["--batch", "0"], "--batch"), (["--grid-pools", "0.05,1"], "--grid-pools"),
    (["--grid-pools", "a"], "--grid-pools"),
    (["--confirm-workloads", "chat,online_qa"], "--confirm-workloads"),
    (["--out", "x"], "--out")])  # no abbreviations: --out is not --out-dir
def test_bad_flags_are_one_line_naming_the_flag_exit_2(argv, flag, capsys):
    with pytest.raises(SystemExit) as err:
        bench.parse_args(argv)
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], lines


def test_the_live_builtins_are_the_ones_sglang_serves():
    """The live runs pass SGLang's built-ins as --radix-eviction-policy: each must be one
    SGLang's server accepts (fifo runs in replay only, on SGLang's tree)."""
    choices = pytest.importorskip("sglang.srt.arg_groups.choices").RADIX_EVICTION_POLICY_CHOICES
    assert set(bench.SGLANG_BUILTINS) == set(choices) - {"lru"}


def test_each_workload_and_model_has_its_own_results_file(tmp_path):
    files = bench.ResultFiles(tmp_path, "small", {"model": "small"}, fresh=False)
    a = bench.Cell("grid", "online_qa", 0.05, "c10", "lru", 0)
    b = bench.Cell("confirm", "chat", 0.05, "c10", "lru", 0)
    files.add(a, {"x": 1})
    files.add(b, {"x": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang_ttft_chat_small.json",
                                                          "sglang_ttft_online_qa_small.json"]
    again = bench.ResultFiles(tmp_path, "small", {"model": "small"}, fresh=False)
    assert a in again and b in again and again.runs() == {a.key: {"x": 1}, b.key: {"x": 2}}


def test_the_replay_serves_each_live_prompts_tokens_and_sharing():
    """--replay replays what a live run serves: each request as long as its prompt (the
    first token, shared by every prompt, included) and the same distinct tokens, so the
    same pool holds the same share of them."""
    for name in ("aibrix", "online_qa"):
        prompts, _ = bench.run_prompts(name, 60, bench.SCALES[name])
        workload = bench.replay_workload(bench.load_workload(name, 60), 60, bench.SCALES[name])
        assert [r.total_tokens for r in workload.requests] == [len(p) for p in prompts]
        # live prompts may also share a token by chance (sibling blocks drawn with the same first id)
        assert 0 <= workload.distinct_tokens - bench.distinct_tokens(prompts) <= workload.total_tokens // 1000


def test_the_replay_builds_each_policy_as_its_server_does():
    from sglang_server import import_sglang_or_skip

    import_sglang_or_skip()
    tlru = {"threshold": 4, "next_prompt_estimate": 2}
    assert bench.replay_policy("tlru", tlru, 1000).options == tlru
    assert bench.replay_policy("lru", tlru, 1000).name == "lru"
    assert bench.replay_policy("lfu", tlru, 1000).options == {}
    for name, noise in (("laru", None), ("laru~0.5", 0.5), ("laru~1", 1.0)):
        policy = bench.replay_policy(name, tlru, 1000)
        assert policy.name == "laru"
        inner = policy.predictor.inner  # behind the server's time guard
        assert getattr(getattr(inner, "noise", None), "p", None) == noise
    assert bench.replay_policy("lpc", tlru, 1000).name == "lpc"


def test_the_replay_table_orders_policies_by_cached_tokens():
    replayed = {"grid|online_qa|0.05": {"lru": 0.10, "laru": 0.30, "tlru": 0.1004}}
    runs = {f"grid|online_qa|0.05|c10|{p}|0": {"cached_ratio": v}
            for p, v in (("lru", 0.15), ("laru", 0.31), ("tlru", 0.22))}
    row = bench.replay_table(replayed, runs).splitlines()[-1]
    assert "laru 0.300 / 0.310" in row
    assert row.endswith("| laru > tlru = lru | laru > tlru > lru |"), row


def test_the_summary_shows_p99_over_lru_only_where_lru_ran_in_the_same_repeat():
    run = {"cached_ratio": 0.08, "ttft_p99_ms": 900.0}
    alone = bench.summary({"grid|online_qa|0.025|c20|laru|0": run})  # LRU not run (yet)
    assert alone.splitlines()[-1] == "| grid online_qa 2.5% c20 | 0.080 |"
    both = bench.summary({"grid|online_qa|0.025|c20|laru|0": run,
                          "grid|online_qa|0.025|c20|lru|0": {"cached_ratio": 0.02, "ttft_p99_ms": 1000.0}})
    assert both.splitlines()[-1] == "| grid online_qa 2.5% c20 | 0.020 | 0.080 / **0.90** |"
