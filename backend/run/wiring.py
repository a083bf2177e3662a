"""Which target hidden states feed the draft's fc, as explicit HF `hidden_states` indices.

HF index k: 0 = embedding output, k = j+1 = residual stream after decoder layer j (pre-norm; see
`backend.target.capture`). Two conventions share one config field name (docs/reference.md §2):
  A  nested `eagle_config.eagle_aux_hidden_state_layer_ids` = output of layer k  -> HF k+1
  B  top-level `eagle_aux_hidden_state_layer_ids`          = HF index k         -> HF k
Neither present: HF [2, L//2, L-3] (= outputs of layers [1, L//2-1, L-4]).

This module is plain Python (no torch): pages parse user text with `parse_aux_indices`, the one
parser of a wiring list, and `override_wiring` turns a typed list into a Wiring. What a draft
declares, what each engine makes of it and what is fed (`fed_wiring`) are read in
backend/drafts/readings.py only.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend import BadInput
from backend.plain import Plain

CONVENTIONS = {
    "hf": "HF hidden_states index (0 = embedding output, k = output of layer k-1)",
    "layer_output": "output-of-layer id (SpecForge / SGLang explicit ids): HF index = id + 1",
}


@dataclass(frozen=True)
class Wiring(Plain):
    aux_hf_indices: tuple[int, ...]
    source: str  # a sentence: where the indices came from and which convention turned them into HF


def parse_aux_indices(text: str | None) -> tuple[int, ...] | None:
    """'2, 4,5' -> (2, 4, 5); empty -> None (use the draft's declared wiring); BadInput where a part is
    not an integer. How many and which: `override_wiring`, once the target's depth is known."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        values = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise BadInput(f"{text!r}: expected three comma-separated integers, e.g. 2,15,27") from None
    return values


def default_hf_indices(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]


def to_hf_indices(ids, convention: str) -> list[int]:
    if convention == "hf":
        return list(ids)
    if convention == "layer_output":
        return [i + 1 for i in ids]
    raise BadInput(f"unknown wiring convention {convention!r}; use one of {sorted(CONVENTIONS)}")


def override_wiring(ids, num_target_layers: int, convention: str = "hf") -> Wiring:
    """The wiring a user types in place of the draft's (`--aux-hf-indices`, the pages' override), in
    `convention`, checked against the target: the override's one check (three HF indices in
    0..layers), made where the target's depth is known (service/checkpoints.py checked_override reads it
    from the target's config before any weights load). The one place an override becomes a Wiring;
    the wiring a draft declares comes only from its readings (backend/drafts/readings.py)."""
    hf = to_hf_indices(ids, convention)
    wiring = Wiring(tuple(hf), f"override {list(ids)} ({CONVENTIONS[convention]})")
    check_indices(wiring.aux_hf_indices, num_target_layers)
    return wiring


def check_indices(indices, num_target_layers: int) -> None:
    if len(indices) != 3:
        raise BadInput(
            f"EAGLE-3 fuses exactly three target states; got {len(indices)} indices {list(indices)}"
        )
    bad = [i for i in indices if not 0 <= i <= num_target_layers]
    if bad:
        raise BadInput(
            f"aux HF indices {bad} out of range: the target has {num_target_layers} layers, "
            f"so valid HF indices are 0..{num_target_layers}"
        )
