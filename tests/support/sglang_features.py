"""SGLang /generate responses with `return_hidden_states`, built from a known truth: the target's
own hidden states (transformers' output_hidden_states, independent of SpecLens's capture) at the HF
indices a server fed, laid out as SGLang returns them under EAGLE-3 (issue 42)."""

from __future__ import annotations


def response(target, prompt: list[int], fed: list[int], max_new: int = 12, layout: str = "fixed") -> dict:
    """`layout`: "fixed" (sglang#28496: the prefill's rows, then one row per token after the first),
    "older" (decode rows truncated: one every other token, as releases before it returned)."""
    import torch

    with torch.inference_mode():
        out = target.model.generate(
            torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False, pad_token_id=0
        )
        output_ids = out[0, len(prompt) :].tolist()
        tokens = prompt + output_ids
        hidden = target.model(input_ids=torch.tensor([tokens]), output_hidden_states=True).hidden_states
    rows = torch.cat([hidden[i][0] for i in fed], dim=-1).to(torch.bfloat16).float()  # a server's bf16
    prefill = rows[: len(prompt)].tolist()
    decode = rows[len(prompt) : len(tokens) - 1]
    if layout == "older":
        decode = decode[::2]
    return {
        "text": "",
        "output_ids": output_ids,
        "meta_info": {"hidden_states": [prefill, *decode.tolist()], "completion_tokens": len(output_ids)},
        "input_ids": prompt,
    }
