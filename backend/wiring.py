"""Which target hidden states feed the draft's fc, as explicit HF `hidden_states` indices.

HF index k: 0 = embedding output, k = j+1 = residual stream after decoder layer j (pre-norm; for
k = L that is captured with a hook, since `hidden_states[L]` in transformers is post-norm).

Two conventions share one config field name (eagle3-reference.md section 2):
  A  nested `eagle_config.eagle_aux_hidden_state_layer_ids` = output of layer k  -> HF k+1
  B  top-level `eagle_aux_hidden_state_layer_ids`          = HF index k         -> HF k
Neither present: HF [2, L//2, L-3] (= outputs of layers [1, L//2-1, L-4]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend import BadInput
from backend.draft_config import DraftConfig

CONVENTIONS = {
    "hf": "HF hidden_states index (0 = embedding output, k = output of layer k-1)",
    "layer_output": "output-of-layer id (SpecForge / SGLang explicit ids): HF index = id + 1",
}


@dataclass(frozen=True)
class Wiring:
    aux_hf_indices: tuple[int, ...]
    source: str  # a sentence: where the indices came from and which convention turned them into HF

    def to_dict(self) -> dict:
        return {"aux_hf_indices": list(self.aux_hf_indices), "source": self.source}


def default_hf_indices(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]


def to_hf_indices(ids: list[int], convention: str) -> list[int]:
    if convention == "hf":
        return list(ids)
    if convention == "layer_output":
        return [i + 1 for i in ids]
    raise BadInput(f"unknown wiring convention {convention!r}; use one of {sorted(CONVENTIONS)}")


def resolve_wiring(config: DraftConfig, num_target_layers: int, override: list[int] | None = None,
                   override_convention: str = "hf") -> Wiring:
    if override is not None:
        hf = to_hf_indices(override, override_convention)
        wiring = Wiring(tuple(hf), f"override {override} ({CONVENTIONS[override_convention]})")
    elif config.nested_aux_ids is not None:
        hf = to_hf_indices(config.nested_aux_ids, "layer_output")
        wiring = Wiring(tuple(hf), f"eagle_config.eagle_aux_hidden_state_layer_ids {config.nested_aux_ids} "
                                   "(nested: output-of-layer ids, HF = id + 1)")
    elif config.top_level_aux_ids is not None:
        hf = list(config.top_level_aux_ids)
        wiring = Wiring(tuple(hf), f"top-level eagle_aux_hidden_state_layer_ids {hf} (HF indices)")
    else:
        hf = default_hf_indices(num_target_layers)
        wiring = Wiring(tuple(hf), f"default [2, L//2, L-3] for L={num_target_layers}")
    check_indices(wiring.aux_hf_indices, num_target_layers)
    return wiring


def check_indices(indices, num_target_layers: int) -> None:
    if len(indices) != 3:
        raise BadInput(f"EAGLE-3 fuses exactly three target states; got {len(indices)} indices {list(indices)}")
    bad = [i for i in indices if not 0 <= i <= num_target_layers]
    if bad:
        raise BadInput(f"aux HF indices {bad} out of range: the target has {num_target_layers} layers, "
                       f"so valid HF indices are 0..{num_target_layers}")


def decoder_layers(model) -> torch.nn.ModuleList:
    base = getattr(model, "model", None) or model.base_model
    layers = getattr(base, "layers", None)
    if layers is None:
        raise BadInput(f"{type(model).__name__}: cannot find its decoder layers (expected model.layers)")
    return layers


class AuxCapture:
    """Forward hooks that capture HF-indexed residual-stream states during target forwards.

    Hooks capture only the requested indices (no `output_hidden_states`, which keeps all L+1) and
    always the pre-norm stream, including index L.
    """

    def __init__(self, model, aux_hf_indices):
        self.indices = tuple(aux_hf_indices)
        self.captured: dict[int, torch.Tensor] = {}
        layers = decoder_layers(model)
        self.handles = []
        for index in sorted(set(self.indices)):
            module = model.get_input_embeddings() if index == 0 else layers[index - 1]
            self.handles.append(module.register_forward_hook(self._hook(index)))

    def _hook(self, index):
        def store(_module, _inputs, output):
            self.captured[index] = output[0] if isinstance(output, tuple) else output
        return store

    def features(self) -> torch.Tensor:
        """The last forward's fused input for the draft: [T, 3*Ht], chunks in wiring order."""
        return torch.cat([self.captured[i][0] for i in self.indices], dim=-1)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
