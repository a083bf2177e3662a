"""The features a server fed the draft, held against the target's own layers (`serve-check --features`).

SGLang, started with --enable-return-hidden-states and asked with `return_hidden_states: true`,
returns `meta_info.hidden_states`: under EAGLE-3 the concatenated aux states, k x H wide
(python/sglang/srt/layers/logits_processor.py stores torch.cat(aux_hidden_states, -1)). The first
entry is the prefill's [prompt_len, k*H]; then rows for the generated tokens. Since sglang#28496
those are one row per accepted token, trimmed to the finished length: row j of prompt + output is
the state at position j (the last output token is never forwarded, so output - 1 decode rows, or
output rows where the engine forwarded it). Earlier releases truncated the decode rows and could mix
requests (sglang#26163): the prefill entry is still whole there, so only it is compared.

Each slot of H columns is compared with the target's residual stream at every HF index it could be
(0 = the embedding output, i = the output of layer i-1; the pre-norm stream, as the draft is fed):
mean cosine and norm ratio over the aligned rows. The slot's best index is what the server fed.
"""

from __future__ import annotations

import torch

from backend import BadInput
from backend.target.capture import AuxCapture

CLOSE = 0.98  # a slot whose best mean cosine is below this matches no layer


def served_rows(response: dict, where: str) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
    """(prefill rows [P, D], decode rows [R, D] or None, output_ids) of one /generate response."""
    meta = response.get("meta_info")
    states = meta.get("hidden_states") if isinstance(meta, dict) else None
    if not isinstance(states, list) or not states:
        raise BadInput(
            f"{where}: no meta_info.hidden_states (start SGLang with --enable-return-hidden-states and send "
            "return_hidden_states: true)"
        )
    output_ids = response.get("output_ids")
    if not isinstance(output_ids, list) or not all(isinstance(t, int) for t in output_ids):
        raise BadInput(f"{where}: no output_ids list in the response")
    try:
        prefill = torch.tensor(states[0], dtype=torch.float32)
        decode = torch.tensor(states[1:], dtype=torch.float32) if len(states) > 1 else None
    except (TypeError, ValueError, RuntimeError) as error:
        raise BadInput(f"{where}: meta_info.hidden_states is not a list of numeric rows ({error})") from None
    if prefill.ndim == 1:
        prefill = prefill[None]
    if prefill.ndim != 2 or (
        decode is not None and (decode.ndim != 2 or decode.shape[1] != prefill.shape[1])
    ):
        raise BadInput(f"{where}: meta_info.hidden_states rows are not all of one width")
    if not bool(torch.isfinite(prefill).all()):
        raise BadInput(f"{where}: meta_info.hidden_states holds NaN or infinite values")
    return prefill, decode, output_ids


def aligned(prompt_len: int, prefill: torch.Tensor, decode: torch.Tensor | None, n_output: int, where: str):
    """(rows, the positions they stand for, the layout: 'sglang>=28496' | 'older (prefill rows only)')."""
    if prefill.shape[0] != prompt_len:
        raise BadInput(
            f"{where}: the prefill entry has {prefill.shape[0]} rows for a prompt of {prompt_len} tokens "
            "(is this the prompt the request sent?)"
        )
    rows_decode = 0 if decode is None else decode.shape[0]
    if decode is not None and rows_decode in (n_output - 1, n_output) and rows_decode > 0:
        usable = min(rows_decode, n_output - 1)  # the last output token was never forwarded
        return torch.cat([prefill, decode[:usable]]), prompt_len + usable, "sglang>=28496"
    return prefill, prompt_len, f"older (prefill rows only: {rows_decode} decode rows for {n_output} tokens)"


def layer_states(target, tokens: list[int]) -> dict[int, torch.Tensor]:
    """The target's pre-norm residual stream at every HF index 0..L-1 over `tokens`: {index: [T, H]}."""
    indices = list(range(target.num_layers))
    with torch.inference_mode(), AuxCapture(target.model, indices) as capture:
        target.model(input_ids=torch.tensor([tokens], device=target.device))
        return {i: capture.captured[i][0].float().cpu() for i in indices}


def match_slots(rows: torch.Tensor, states: dict[int, torch.Tensor], hidden: int) -> list[dict]:
    """Per slot of `hidden` columns: mean cosine and norm ratio against every HF index, best first."""
    if rows.shape[1] % hidden:
        raise BadInput(
            f"the served rows are {rows.shape[1]} wide, not a multiple of the target's hidden size {hidden}"
        )
    slots = []
    for slot in range(rows.shape[1] // hidden):
        chunk = rows[:, slot * hidden : (slot + 1) * hidden]
        scores = []
        for index, state in states.items():
            reference = state[: chunk.shape[0]]
            cosine = torch.nn.functional.cosine_similarity(chunk, reference, dim=1)
            ratio = chunk.norm(dim=1) / reference.norm(dim=1).clamp_min(1e-12)
            scores.append(
                {
                    "hf_index": index,
                    "cosine": float(cosine.mean()),
                    "cosine_min": float(cosine.min()),
                    "norm_ratio": float(ratio.mean()),
                    "per_token": [round(float(c), 5) for c in cosine],
                }
            )
        scores.sort(key=lambda s: -s["cosine"])
        best = scores[0]
        slots.append(
            {
                "slot": slot,
                "best": best["hf_index"] if best["cosine"] >= CLOSE else None,
                "cosine": best["cosine"],
                "norm_ratio": best["norm_ratio"],
                "runner_up": scores[1] if len(scores) > 1 else None,
                "scores": scores,
            }
        )
    return slots


def verdict(slots: list[dict], trained: list[int], served_reading: list[int] | None) -> tuple[bool, str]:
    """(fed as trained, the sentence): which layer each slot holds against the trained wiring."""
    found = [s["best"] for s in slots]
    if len(found) != len(trained):
        return False, (
            f"the server fed {len(found)} slots, the draft was trained on {len(trained)} aux states (HF {trained})"
        )
    wrong = [
        f"slot {s['slot']} matches {_layer(s['best'])}, not the trained HF {t}"
        + (f" (best cosine {s['cosine']:.3f})" if s["best"] is None else "")
        for s, t in zip(slots, trained, strict=True)
        if s["best"] != t
    ]
    if not wrong:
        return True, f"the server fed the trained wiring HF {trained}, slot for slot"
    sentence = "; ".join(wrong)
    if served_reading is not None and found == list(served_reading) and found != trained:
        sentence += f": the server fed HF {found}, which is how it reads the draft's config"
    return False, sentence


def _layer(index: int | None) -> str:
    return "no layer" if index is None else f"HF {index}"
