"""A replay request is frozen and validated when it is made; its wiring and prompt are resolved once."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.drafts.readings import reading_of
from backend.run.request import MAX_STEPS, ReplayRequest


def request(**kwargs) -> ReplayRequest:
    return ReplayRequest("target", "drafts/final", **{"prompt_ids": [1, 2], **kwargs})


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"prompt_ids": None}, "exactly one of prompt ids or prompt text"),
        ({"prompt_text": "hi"}, "exactly one of prompt ids or prompt text"),
        ({"prompt_ids": []}, "the prompt is empty"),
        ({"chat_template": True}, "the chat template applies to prompt text"),
        ({"prompt_ids": None, "prompt_text": "  "}, "the prompt is empty"),
        ({"num_steps": 0}, "K \\(draft steps\\) must be in 1.."),
        ({"num_steps": MAX_STEPS + 1}, "K \\(draft steps\\) must be in 1.."),
        ({"max_new_tokens": 0}, "max new tokens must be in 1..32768, got 0"),
        ({"topk": 4}, "topk > 1 needs --num-draft-tokens"),
        ({"topk": 4, "num_draft_tokens": 80}, "needs 79 candidates but steps=4, topk=4 draft only 52"),
        ({"topk": 2, "num_draft_tokens": 5, "engine": "vllm"}, "vLLM verifies chains only"),
        ({"temperature": float("nan")}, "temperature must be a number >= 0"),
        ({"temperature": -1.0}, "temperature must be a number >= 0"),
        ({"top_p": 0.0}, "top_p must be in \\(0, 1\\]"),
        ({"top_k": -2}, "top_k must be >= 1"),
        ({"seed": -1}, "seed must be in"),
        ({"draft_attention": "slots"}, "unknown draft attention .slots.; use one of"),
    ],
)
def test_bad_requests_are_refused(kwargs, reason):
    with pytest.raises(BadInput, match=reason):
        request(**kwargs)


def test_requests_are_frozen_with_tuples():
    made = request(prompt_ids=[1, 2, 3], aux_hf_indices=[0, 2, 4])
    assert made.prompt_ids == (1, 2, 3) and made.aux_hf_indices == (0, 2, 4)
    with pytest.raises(AttributeError):
        made.num_steps = 3  # type: ignore[misc]
    assert made.label == "final K=4 wiring HF [0, 2, 4] on prompt"
    assert request(sample_ref="dataset 1 #3").label == "final K=4 on dataset 1 #3"


def test_wiring_and_prompt_are_resolved_for_the_loaded_pair():
    from backend.drafts.draft_config import parse_draft_config

    config = parse_draft_config(
        {
            "hidden_size": 16,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "vocab_size": 50,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
        }
    )
    from backend.engine.draft_model import Eagle3Draft

    draft = Eagle3Draft(config, target_embedding=None)
    assert reading_of("auto", None, draft, 8)[1].aux_hf_indices == (2, 4, 5)
    assert reading_of("auto", (0, 2, 4), draft, 8)[1].aux_hf_indices == (0, 2, 4)
    # vLLM 0.32's V1 runner (the CPU build) reads the nested ids as HF indices; its V2 runner ignores them
    assert reading_of("vllm", None, draft, 8)[1].aux_hf_indices == (1, 3, 4)
    assert reading_of("vllm-v2", None, draft, 8)[1].aux_hf_indices == (2, 4, 5)
    assert reading_of("sglang", None, draft, 8)[0].engine == "sglang"
    with pytest.raises(BadInput, match="out of range"):
        reading_of("auto", (0, 2, 9), draft, 8)
    with pytest.raises(BadInput, match="unknown engine 'trt'"):
        request(engine="trt")
    assert prompt_ids(request(), None) == [1, 2]
    with pytest.raises(BadInput, match="has no tokenizer"):
        prompt_ids(request(prompt_ids=None, prompt_text="hi"), None)

    def tokenizer(text):
        return {"input_ids": [ord(c) for c in text]}

    assert prompt_ids(request(prompt_ids=None, prompt_text="hi"), tokenizer) == [104, 105]
    with pytest.raises(BadInput, match="tokenizes to nothing"):
        prompt_ids(request(prompt_ids=None, prompt_text="hi"), lambda text: {"input_ids": []})


def test_sglang_rewrites_are_applied_and_both_values_kept():
    from backend.run.shapes import sglang_shape

    decoding = request(num_steps=5, topk=1, num_draft_tokens=16).decoding()
    assert (decoding.shape.topk, decoding.shape.num_draft_tokens) == (1, 6)
    assert (request(num_steps=5, topk=1, num_draft_tokens=16).topk, decoding.shape.num_steps) == (1, 5)
    assert any("rewrites num_draft_tokens 16 -> 6" in note for note in decoding.notes)
    tree = request(num_steps=3, topk=4, num_draft_tokens=8, temperature=0.7).decoding()
    assert (tree.shape.topk, tree.shape.num_draft_tokens, tree.rule, tree.greedy) == (4, 8, "sglang", False)
    assert request(temperature=0.7, top_k=1).decoding().greedy  # SGLang: top_k 1 is greedy
    assert request(temperature=0.7, engine="vllm").decoding().rule == "vllm"
    assert sglang_shape(None, None, None, "LlamaForCausalLM")[0].num_draft_tokens == 8  # auto-choose
    assert sglang_shape(None, None, None, "Qwen3ForCausalLM")[0].topk == 4  # unlisted: (5, 4, 8)
    assert sglang_shape(None, None, None, "DeepseekV3ForCausalLM")[0].topk == 1
    with pytest.raises(ValueError, match="requires --speculative-num-steps"):
        sglang_shape(None, 4, 8)


SMOLLM2 = __import__("pathlib").Path(__file__).resolve().parents[2] / "demo" / "smollm2"


@pytest.mark.skipif(
    not (SMOLLM2 / "target" / "tokenizer.json").is_file(), reason="run python -m demo.smollm2"
)
def test_a_typed_prompt_behind_the_chat_template_is_what_the_bundled_eval_set_holds():
    """The chat template on a typed prompt renders exactly the ids the real pair's HumanEval samples
    hold (demo/build_chat rendered them with apply_chat_template); raw text gets no template."""
    import json

    from backend.engine.loading import load_tokenizer

    tokenizer = load_tokenizer(SMOLLM2 / "target")
    with open(SMOLLM2 / "data" / "eval.jsonl") as lines:
        records = [json.loads(next(lines)) for _ in range(3)]
    for record in records:
        typed = ReplayRequest("t", "d", prompt_text=record["prompt"], chat_template=True)
        assert prompt_ids(typed, tokenizer) == record["input_ids"][: record["n_prompt_tokens"]]
        raw = prompt_ids(ReplayRequest("t", "d", prompt_text=record["prompt"]), tokenizer)
        assert "<|im_start|>" not in tokenizer.decode(raw)


def test_a_tokenizer_without_a_chat_template_is_refused_with_its_name():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, "[UNK]"))
    )
    with pytest.raises(BadInput, match="has no chat template"):
        prompt_ids(ReplayRequest("t", "d", prompt_text="a", chat_template=True), tokenizer)


def prompt_ids(request_, tokenizer):
    from backend.service.plan import prompt_ids as of  # torch: imported when a test runs, not collected

    return of(request_, tokenizer)
