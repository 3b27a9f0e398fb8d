"""SGLang's real radix tree driven by lcr's policies (skipped without SGLang)."""
from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from conftest import real_trace
from sglang_server import import_sglang_or_skip

import_sglang_or_skip()

from lcr.cli import main  # noqa: E402
from lcr.errors import LcrInputError  # noqa: E402
from lcr.integrations import sglang as integ  # noqa: E402
from lcr.integrations.sglang_sim import MockAllocator, build_cache, replay_sglang  # noqa: E402
from lcr.kv import PathOracle, RadixLRU, build_workload, make_radix_policy, registry, replay_lcr  # noqa: E402
from lcr.traces import generate  # noqa: E402


def online_qa():
    return build_workload(generate("online_qa:conversations=80,seed=4"))


def policy(name, w, capacity, noise=0.0, predictor=None):
    if predictor is None and name in registry.PREDICTIVE:
        predictor = PathOracle(w, noise)
    if name == "rlt":  # SGLang's tree evicts whole nodes: RLT's whole-leaf variant
        return make_radix_policy(name, w, whole_leaf=True)
    return make_radix_policy(name, w, predictor=predictor)


# Every registered policy that both trees run, except LPC's (they need a chat trace,
# tests/test_lpc.py compares them): a new policy is checked here without a line added.
BOTH_ENGINES = [name for name in registry.POLICIES
                if registry.policy(name).engines == ("lcr", "sglang") and "workload" not in registry.policy(name).fixed]


def test_the_parity_check_covers_lcr_s_own_policies():
    assert {"lru", "laru", "fpb", "hf", "rlt", "opt"} <= set(BOTH_ENGINES)


@pytest.mark.parametrize("name", BOTH_ENGINES)
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_sglang_tree_and_lcr_tree_hit_the_same_tokens(name, noise):
    w = online_qa()
    capacity = w.distinct_tokens // 10
    assert replay_sglang(w, capacity, policy(name, w, capacity, noise)) == \
        replay_lcr(w, capacity, policy(name, w, capacity, noise))


def test_the_sglang_driver_feeds_laru_s_shadow_lru_the_same_requests():
    # The default LARU keeps an exact LRU beside the cache from the engine's on_request:
    # inside SGLang it must count LRU's own hit tokens, and decide as in lcr's tree.
    w = online_qa()
    capacity = w.distinct_tokens // 10
    inverted = policy("laru", w, capacity, 1.0)
    hits = replay_sglang(w, capacity, inverted)
    assert inverted.shadow is not None and inverted.shadow.hits == replay_lcr(w, capacity, RadixLRU())
    assert hits == replay_lcr(w, capacity, policy("laru", w, capacity, 1.0))
    blocks = integ.request_blocks([7, 7, 9, 9, 9, 4], page_size=2, sim_keys=True)
    assert blocks == ([7, 9, 4], [2, 3, 1])
    paths, tokens = integ.request_blocks([1, 2, 3, 4, 5], page_size=2, sim_keys=False)
    assert tokens == [2, 2, 1] and len(set(paths)) == 3
    assert integ.request_blocks([1, 2, 3, 9], page_size=2, sim_keys=False)[0][0] == paths[0]  # a prefix's hash
    # a page is named by its whole prefix, as SGLang's nodes are: same page, other prefix, other id
    assert integ.request_blocks([9, 9, 3, 4, 5], page_size=2, sim_keys=False)[0][1] != paths[1]


def test_the_sglang_driver_hands_in_an_empty_lru_twin_of_its_capacity():
    from lcr.kv import RadixTree

    w = online_qa()
    capacity = w.distinct_tokens // 10
    cache, allocator = build_cache(policy("laru", w, capacity), capacity)
    replay_sglang(w, capacity, None, cache=(cache, allocator))
    twin = cache.driver.lru_twin()
    assert isinstance(twin, RadixTree) and type(twin.policy) is RadixLRU
    assert twin.capacity_tokens == capacity and twin.used_tokens == 0


def test_the_driver_tells_the_policy_which_request_its_tree_cached():
    """A live server inserts a prompt after its prefill, inside the request's context: the
    driver passes that request's match time on (``on_request_cached``); an insert outside
    a known request (lcr sim-kv: right after the match) is the latest request's."""
    from types import SimpleNamespace

    w = online_qa()
    capacity = w.distinct_tokens // 10
    cache, allocator = build_cache(policy("laru", w, capacity), capacity)
    driver, told = cache.driver, []
    driver.policy.on_request_cached = lambda t, blocks, done, now: told.append((t, now))
    replay_sglang(w, capacity, None, cache=(cache, allocator))
    assert told and told == sorted(told) and told[-1][1] <= driver.now
    assert all(t == now for t, now in told)  # lcr sim-kv inserts right after the match
    told.clear()
    driver._request_time["r7"] = 5
    inserted = SimpleNamespace(key=SimpleNamespace(raw_token_ids=lambda: [3, 3]))
    with driver.inserting_for(SimpleNamespace(rid="r7")):
        driver.on_insert(inserted, SimpleNamespace(last_device_node=cache.tree_core.root_node))
    driver.on_insert(inserted, SimpleNamespace(last_device_node=cache.tree_core.root_node))
    assert told == [(5, driver.now), (driver.now, driver.now)]


class ServedLikeAServer:
    """SGLang's tree served as a server serves it: a request matches all but its last token
    (the key's limit) and holds its path, inserts its prompt after the prefill, then its
    prompt and one generated token when it finishes (SGLang's checkpoint_into_tree moves
    the request's lock at each insert). Works for lcr's trees and SGLang's stock one."""

    def __init__(self, cache, allocator):
        self.cache, self.allocator = cache, allocator
        self.running = {}  # rid -> (request, prompt, its row of cached tokens)

    def _alloc(self, n):
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams
        if n > self.allocator.available_size():
            self.cache.evict(EvictParams(num_tokens=n - self.allocator.available_size()))
        return self.allocator.alloc(n)

    def _insert(self, req, tokens, held, finished):
        from contextlib import nullcontext
        from array import array

        import torch
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        req.finished = lambda: finished
        value = torch.cat([held, self._alloc(len(tokens) - len(held))])
        driver = getattr(self.cache, "driver", None)
        with driver.inserting_for(req) if driver is not None else nullcontext():
            result = self.cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value,
                                                    prev_prefix_len=len(held)))
        self.cache.unlock(req.lock)
        req.lock = None if finished else self.cache.lock(result.last_device_node)
        return value

    def start(self, rid, prompt) -> int:
        """Match and prefill ``prompt``; its hit tokens."""
        from array import array
        from types import SimpleNamespace

        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        req = SimpleNamespace(rid=rid, session=None)
        result = self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt), limit=len(prompt) - 1),
                                                           req=req))
        req.lock = self.cache.lock(result.last_device_node)
        row = self._insert(req, prompt, self.cache.path_device_indices(result.last_device_node), finished=False)
        self.running[rid] = (req, prompt, row)
        return result.device_prefix_len

    def finish(self, rid, generated) -> None:
        req, prompt, row = self.running.pop(rid)
        self._insert(req, prompt + [generated], row, finished=True)


def test_laru_s_twin_holds_what_sglang_s_tree_holds_as_a_server_serves():
    # With the cache evicting by LRU, the LRU twin must hold exactly the tokens SGLang's
    # tree holds, and hit what it hits.
    laru = make_radix_policy("laru", online_qa(), predictor=None)
    laru.predict = lambda keys, now: False  # no predictions: LRU throughout
    cache, allocator = build_cache(laru, 40, sim_keys=False)
    server = ServedLikeAServer(cache, allocator)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 7, 8, 50, 11, 12],
               [20] * 12, [21] * 12, [1, 2, 3, 4, 9, 9, 9, 9, 51, 13], [22] * 12, [1, 2, 3, 4, 5, 6, 9], [22] * 12]
    server_hits = []
    for i, prompt in enumerate(prompts):
        server_hits.append(server.start(f"r{i}", prompt))
        server.finish(f"r{i}", 50 + i)  # the token it generated
        assert laru.shadow.twin.used_tokens == cache.evictable_size() + cache.protected_size()
    assert laru.stats.evictions > 0 and server_hits[2] == 9 and server_hits[5] == 4  # a generated token hit, one evicted
    assert server_hits[8] == 11  # a repeated prompt: all but its last token
    assert laru.shadow.hits == sum(server_hits)


def test_a_request_is_as_recent_as_its_finish_in_lcr_s_order_as_in_sglang_s():
    # SGLang's LRU dates every node an insert walks: a request that ran long is as recent
    # as its finish, not as its match. lcr's policies count time in requests matched; the
    # driver re-dates an inserted path at the latest request (on_touch), in the cache and
    # in LARU's LRU twin. A runs while B and C are matched, B finishes first: D's room
    # must come from B (dated at its match, A would go first).
    from lcr.integrations.sglang_sim import SGLangStrategy

    laru = make_radix_policy("laru", online_qa(), predictor=None)
    laru.predict = lambda keys, now: False  # no predictions: LRU throughout
    servers = [ServedLikeAServer(*build_cache(policy, 40, sim_keys=False))
               for policy in (SGLangStrategy("lru"), RadixLRU(), laru)]
    a, b, c, d = ([10 * i + j for j in range(10)] for i in range(1, 5))
    for server in servers:
        server.start("A", a)
        server.start("B", b)
        server.finish("B", 90)
        server.start("C", c)
        server.finish("A", 91)
        server.finish("C", 92)
        server.start("D", d)  # 33 tokens cached, 10 more needed: one request's path goes
        server.finish("D", 93)
        assert server.start("A again", a) == 9
        twin_hits = laru.shadow and laru.shadow.hits  # (LARU is served last)
        assert server.start("B again", b) == 0
    assert twin_hits == laru.shadow.hits == 9  # the twin held A and lost B, as the cache did


@pytest.mark.parametrize("name", ["lru", "laru"])
def test_engines_agree_on_a_mooncake_slice(name):
    trace = real_trace("mooncake").head(int(real_trace("mooncake").request_offsets[300]))
    w = build_workload(trace)
    capacity = w.distinct_tokens // 20
    assert replay_sglang(w, capacity, policy(name, w, capacity)) == \
        replay_lcr(w, capacity, policy(name, w, capacity))


def test_cli_engines_print_identical_hit_rates(capsys):
    tables = {}
    for engine in ("lcr", "sglang"):
        assert main(["sim-kv", "online_qa:conversations=60", "--cache-tokens", "5%",
                     "--policies", "lru,laru", "--engine", engine]) == 0
        out = capsys.readouterr().out.splitlines()
        tables[engine] = [line for line in out if not line.startswith("#")]
    assert tables["lcr"] == tables["sglang"]


def test_a_failing_predictor_falls_back_to_lru_inside_sglang():
    class Broken:
        def predict(self, keys, now):
            raise ConnectionError("predictor service down")

    w = online_qa()
    capacity = w.distinct_tokens // 10
    laru = make_radix_policy("laru", w, predictor=Broken())
    assert replay_sglang(w, capacity, laru) == replay_lcr(w, capacity, RadixLRU())
    assert laru.stats.extra["predictor_fallbacks"] > 0


def test_eviction_beyond_what_is_evictable_returns_what_it_freed():
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    w = online_qa()
    capacity = w.distinct_tokens // 10
    cache, allocator = build_cache(make_radix_policy("rlt", w), capacity)
    # Fill the cache with a few requests, then ask for far more than it holds.
    replay_sglang(type(w)(w.requests[:20], "head"), capacity, None, cache=(cache, allocator))
    used = capacity - allocator.available_size()
    result = cache.evict(EvictParams(num_tokens=10 * capacity))
    assert result.num_tokens_evicted == used
    assert allocator.available_size() == capacity


def _params(config=None):
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    return CacheInitParams(disable=False, req_to_token_pool=None,
                           token_to_kv_pool_allocator=MockAllocator(4096), page_size=1,
                           tree_components=(ComponentType.FULL,), eviction_policy_config=config)


def test_laru_radix_cache_consumes_its_config_and_uses_its_own_tree_core():
    params = _params({"b": 4, "slack": 0.02, "predictor": "intervals"})
    cache = integ.LARURadixCache(params)
    assert params.eviction_policy_config is None  # SGLang's built-in strategy must not see it
    assert isinstance(cache.tree_core, integ.PolicyTreeCore)
    assert cache.driver.policy.b == 4 and cache.driver.policy.slack == 0.02


def test_bad_backend_config_is_a_clear_error():
    with pytest.raises(LcrInputError, match="laru options: unknown window"):
        integ.LARURadixCache(_params({"window": 3}))


def test_backends_register_once_and_the_plugin_entry_point_is_declared():
    from sglang.srt.mem_cache.registry import registered_radix_cache_backends

    import sglang_patch

    sglang_patch.register()
    sglang_patch.register()  # SGLang loads plugins in every process; twice must not raise
    assert {"lcr-laru", "lcr-fpb", "lcr-hf", "lcr-rlt"} <= set(registered_radix_cache_backends())
    names = {ep.value for ep in entry_points(group="sglang.srt.plugins")}
    if "sglang_patch:register" not in names:
        pytest.skip("lcr's install metadata predates the entry point; reinstall with pip install -e .")


def test_the_sglang_backends_are_the_registry_s_served_policies():
    from lcr.kv import registry

    assert set(integ.CACHE_CLASSES) == set(registry.SERVED) == {"laru", "fpb", "hf", "rlt", "lpc"}
    assert integ.LARURadixCache is integ.cache_class("laru") and integ.LARURadixCache.policy_name == "laru"
    with pytest.raises(LcrInputError, match="unknown cache policy 'opt'"):
        integ.cache_class("opt")


@pytest.mark.parametrize("name", ["laru", "fpb", "hf"])
def test_engines_agree_with_a_learned_style_predictor(name):
    from lcr.kv.predictors import RecentIntervalsPredictor

    w = online_qa()
    capacity = w.distinct_tokens // 10
    runs = []
    for replay in (replay_lcr, replay_sglang):
        predictor = RecentIntervalsPredictor()
        runs.append((replay(w, capacity, make_radix_policy(name, w, predictor=predictor)),
                     dict(predictor.features.depth)))
    assert runs[0] == runs[1]  # same hits, and the same node depths fed to the features


def test_laru_s_twin_evicts_when_sglang_s_tree_does_and_as_much_as_it_had_to():
    # A server allocates a request's room before its tree caches it, and other requests
    # hold pool slots outside the tree (decode tokens, prefills not inserted yet): the
    # tree evicts only when an allocation finds the pool full. The twin mirrors that (sized
    # by the pool left to the tree at each match, it found no room for a burst's prompts,
    # docs/history.md): with the cache evicting by LRU it holds the tree's tokens after
    # every request, and hits what the server hits.
    laru = make_radix_policy("laru", online_qa(), predictor=None)
    laru.predict = lambda keys, now: False  # no predictions: LRU throughout
    cache, allocator = build_cache(laru, 60, sim_keys=False)
    server = ServedLikeAServer(cache, allocator)
    outside, hits = None, []
    for i in range(24):
        if i % 6 == 2:  # a burst: other requests take 25 slots outside the tree for a while
            outside = server._alloc(25)
        prompt = [100 + i % 5] + [200 + i] * 9  # five shared first tokens, then new ones
        hits.append(server.start(f"r{i}", prompt))
        if i % 6 == 4:
            allocator.free(outside)
        server.finish(f"r{i}", 900 + i)
        assert laru.shadow.twin.used_tokens == cache.evictable_size() + cache.protected_size()
    assert laru.stats.evictions > 10 and laru.shadow.hits == sum(hits) > 0
