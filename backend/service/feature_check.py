"""`serve-check --features`: the features SGLang returned for each request (its
`meta_info.hidden_states`, backend/diagnostics/feature_match.py) against the target's own layers at
every aux index the slot could be, and the verdict against the wiring the draft was trained on.

The responses come from a file (one /generate response per record, a JSON list or JSONL, each with
the request's `input_ids` beside it or the prompts given by --samples in the order they were sent),
or from a live server asked with `return_hidden_states: true`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.plain import Plain
from backend.run.records import Progress, no_progress

DEFINITION = (
    "per slot of H columns of meta_info.hidden_states: the mean cosine (and norm ratio) over aligned rows "
    "against the target's pre-norm residual stream at each HF index (0 = embedding output); the slot "
    "matches the index of the highest cosine when it is >= 0.98"
)


@dataclass(frozen=True)
class LayerScore(Plain):
    """A slot against one HF index: mean and lowest cosine, mean norm ratio, the cosine per row."""

    hf_index: int
    cosine: float
    cosine_min: float
    norm_ratio: float
    per_token: list[float]


@dataclass(frozen=True)
class SlotMatch(Plain):
    """One slot of the served rows: the HF index it holds (`best`, None when no layer matches) with its
    cosine and norm ratio, the runner-up and the three best indices."""

    slot: int
    best: int | None
    cosine: float
    norm_ratio: float
    runner_up: LayerScore | None
    top: list[LayerScore]


@dataclass(frozen=True)
class RequestMatch(Plain):
    """One response against its own tokens: the layout its rows came in, how many rows were compared,
    each slot's best index and the lowest slot cosine."""

    response: int
    layout: str
    rows_compared: int
    slots: list[int | None]
    min_cosine: float


@dataclass(frozen=True)
class FeatureCheck(Plain):
    """serve-check --features' JSON: the wiring the draft was trained on and the one SGLang reads from
    its config, whether the server fed the trained one (the verdict), the pooled slots, each response,
    and the responses whose rows belong to another request (`note` says so)."""

    source: str
    target: str
    draft: str
    trained_hf: list[int]
    sglang_reads_hf: list[int]
    fed_as_trained: bool
    verdict: str
    slots: list[SlotMatch]
    requests: list[RequestMatch]
    disagreeing_requests: list[int]
    note: str | None
    definition: str = DEFINITION


def read_responses(path: str | Path) -> list[dict]:
    """SGLang /generate responses: a JSON object, a list, or JSONL."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such response file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{path}: cannot read the responses ({type(error).__name__})") from None
    return parse_responses(text, str(path))


def parse_responses(text: str, path: str) -> list[dict]:
    """The responses in `text` (named `path` in errors)."""
    try:
        parsed = json.loads(text)
        records = parsed if isinstance(parsed, list) else [parsed]
    except json.JSONDecodeError:
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise BadInput(f"{path}: line {number} is not JSON ({error.msg})") from None
    if not records or not all(isinstance(r, dict) for r in records):
        raise BadInput(f"{path}: expected SGLang /generate responses (JSON objects), one per request")
    return records


def request_features(url: str, prompt_ids: list[int], max_new_tokens: int, timeout: float) -> dict:
    """One greedy /generate request asking for the hidden states (SGLang --enable-return-hidden-states)."""
    body = {
        "input_ids": prompt_ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
        "return_hidden_states": True,
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the user's URL
            answer = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise BadInput(f"{url}: /generate with return_hidden_states failed ({error})") from None
    if not isinstance(answer, dict):
        raise BadInput(f"{url}: /generate answered {type(answer).__name__}, not a response object")
    return {**answer, "input_ids": prompt_ids}


def _vocab_size(target_path: str) -> int | None:
    try:
        config = json.loads((Path(target_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # loading the target says why
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    size = config.get("vocab_size") if isinstance(config, dict) else None
    return size if isinstance(size, int) and size > 0 else None


def _checked(responses: list[dict], prompts, source: str, vocab: int | None) -> list[tuple]:
    """Every response's (prompt, output ids, aligned rows, positions, layout), each checked: a bad one is
    refused, naming it, before a model loads."""
    from backend.diagnostics.feature_match import aligned, served_rows

    def valid(ids) -> bool:
        return isinstance(ids, list) and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < (vocab or 2**31) for t in ids
        )

    checked = []
    for number, response in enumerate(responses):
        where = f"{source}: response {number + 1}"
        prompt = response.get("input_ids")
        if prompt is None:
            if prompts is None or number >= len(prompts):
                raise BadInput(
                    f"{where}: no input_ids beside it; give --samples in the order the requests were sent"
                )
            prompt = prompts[number]
        if not prompt or not valid(prompt):
            raise BadInput(f"{where}: input_ids must be a non-empty list of token ids below {vocab}")
        prefill, decode, output_ids = served_rows(response, where)
        if not valid(output_ids):
            raise BadInput(f"{where}: output_ids hold ids outside the target's vocabulary ({vocab})")
        checked.append(
            (list(prompt), output_ids, *aligned(len(prompt), prefill, decode, len(output_ids), where))
        )
    return checked


def feature_check(
    target_path: str,
    draft_path: str,
    responses: list[dict],
    prompts: list[list[int]] | None = None,
    source: str = "responses",
    progress: Progress = no_progress,
) -> FeatureCheck:
    """Every response's rows against its own tokens' layer states, pooled per slot, and the verdict."""
    import torch

    from backend.diagnostics.feature_match import (
        CLOSE,
        layer_states,
        match_slots,
        verdict,
    )
    from backend.drafts.readings import reading_of
    from backend.service import models

    parsed = _checked(responses, prompts, source, _vocab_size(target_path))  # before any model loads
    target, draft, _ = models.pair(target_path, draft_path)
    trained = list(reading_of("auto", None, draft, target.num_layers)[0].wiring.aux_hf_indices)
    sglang = list(reading_of("sglang", None, draft, target.num_layers)[0].wiring.aux_hf_indices)
    all_rows, all_states, per_request = [], [], []
    for number, (prompt, output_ids, rows, positions, layout) in enumerate(parsed):
        progress(number / len(parsed), f"response {number + 1}/{len(parsed)}")
        states = layer_states(target, (list(prompt) + list(output_ids))[:positions])
        own = match_slots(rows, states, target.hidden_size)
        per_request.append(
            {
                "response": number + 1,
                "layout": layout,
                "rows_compared": positions,
                "slots": [s["best"] for s in own],
                "min_cosine": min(s["cosine"] for s in own),
            }
        )
        all_rows.append(rows)
        all_states.append(states)
    progress(0.95, "pooling the slots")
    # rows that match no layer of their own request's tokens belong to another request (sglang#26163):
    # pooled over the others
    mixed = [r["response"] for r in per_request if r["min_cosine"] < CLOSE]
    kept = [n for n, r in enumerate(per_request) if r["min_cosine"] >= CLOSE] or list(range(len(per_request)))
    slots = match_slots(
        torch.cat([all_rows[n] for n in kept]),
        {i: torch.cat([all_states[n][i] for n in kept]) for i in all_states[0]},
        target.hidden_size,
    )
    fed_as_trained, sentence = verdict(slots, trained, sglang)
    return FeatureCheck(
        source=source,
        target=target_path,
        draft=draft_path,
        trained_hf=trained,
        sglang_reads_hf=sglang,
        fed_as_trained=fed_as_trained,
        verdict=sentence,
        slots=[
            SlotMatch.from_dict({k: v for k, v in s.items() if k != "scores"} | {"top": s["scores"][:3]})
            for s in slots
        ],
        requests=[RequestMatch.from_dict(r) for r in per_request],
        disagreeing_requests=mixed,
        note=(
            f"responses {mixed}: their rows match no layer of their own tokens, so they are another request's "
            "(SGLang before sglang#28496 could misattribute them, sglang#26163); the slots are read from the rest"
            if mixed
            else None
        ),
    )
