"""A replay request is frozen and validated when it is made; its wiring and prompt are resolved once."""

from __future__ import annotations

import pytest

from backend import BadInput
from backend.service.requests import MAX_STEPS, ReplayRequest


def request(**kwargs) -> ReplayRequest:
    return ReplayRequest("target", "drafts/final", **{"prompt_ids": [1, 2], **kwargs})


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"prompt_ids": None}, "exactly one of prompt ids or prompt text"),
        ({"prompt_text": "hi"}, "exactly one of prompt ids or prompt text"),
        ({"prompt_ids": []}, "the prompt is empty"),
        ({"prompt_ids": None, "prompt_text": "  "}, "the prompt is empty"),
        ({"num_steps": 0}, "K \\(draft steps\\) must be in 1.."),
        ({"num_steps": MAX_STEPS + 1}, "K \\(draft steps\\) must be in 1.."),
        ({"max_new_tokens": 0}, "max new tokens must be >= 1"),
        ({"aux_hf_indices": (1, 2)}, "three HF indices >= 0"),
        ({"aux_hf_indices": (-1, 2, 3)}, "three HF indices >= 0"),
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
    from backend.engine.draft_config import parse_draft_config

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
    assert request().reading_for(draft, 8)[1].aux_hf_indices == (2, 4, 5)
    assert request(aux_hf_indices=(0, 2, 4)).reading_for(draft, 8)[1].aux_hf_indices == (0, 2, 4)
    assert request(engine="vllm").reading_for(draft, 8)[1].aux_hf_indices == (2, 4, 5)  # vLLM: the default
    assert request(engine="sglang").reading_for(draft, 8)[0].engine == "sglang"
    with pytest.raises(BadInput, match="out of range"):
        request(aux_hf_indices=(0, 2, 9)).reading_for(draft, 8)
    with pytest.raises(BadInput, match="unknown engine 'trt'"):
        request(engine="trt")
    assert request().prompt_for(None) == [1, 2]
    with pytest.raises(BadInput, match="has no tokenizer"):
        request(prompt_ids=None, prompt_text="hi").prompt_for(None)

    def tokenizer(text):
        return {"input_ids": [ord(c) for c in text]}

    assert request(prompt_ids=None, prompt_text="hi").prompt_for(tokenizer) == [104, 105]
    with pytest.raises(BadInput, match="tokenizes to nothing"):
        request(prompt_ids=None, prompt_text="hi").prompt_for(lambda text: {"input_ids": []})
