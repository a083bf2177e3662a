"""Capture the target's residual-stream states at HF indices with forward hooks (docs/reference.md §2).

Hooks capture only the requested indices (no `output_hidden_states`, which keeps all L+1) and
always the pre-norm stream, including index L (where `hidden_states[L]` in transformers is post-norm).
The replay's target forwards capture through their runner (backend/target/target_runner.py): with
these hooks on transformers' forward, by returning the states on the lean forward.
"""

from __future__ import annotations

import torch

from backend import BadInput


def decoder_layers(model) -> torch.nn.ModuleList:
    base = getattr(model, "model", None) or model.base_model
    layers = getattr(base, "layers", None)
    if layers is None:
        raise BadInput(f"{type(model).__name__}: cannot find its decoder layers (expected model.layers)")
    return layers


def fused(chunks: list[torch.Tensor]) -> torch.Tensor:
    """The draft's fused input [T, 3*Ht] from the states in wiring order (on the first chunk's device:
    a target split across devices computes each where its layer ran)."""
    return torch.cat([c.to(chunks[0].device) for c in chunks], dim=-1)


class AuxCapture:
    """Forward hooks that keep the last forward's states at the given HF indices."""

    def __init__(self, model, aux_hf_indices):
        self.indices = tuple(aux_hf_indices)
        self.captured: dict[int, torch.Tensor] = {}
        layers = decoder_layers(model)
        self.handles = []
        for index in sorted(set(self.indices)):
            if index == 0:  # the input of layer 0: hidden_states[0] even where a model scales its embeddings
                self.handles.append(layers[0].register_forward_pre_hook(self._input_hook(), with_kwargs=True))
            else:
                self.handles.append(layers[index - 1].register_forward_hook(self._hook(index)))

    def _hook(self, index):
        def store(_module, _inputs, output):
            self.captured[index] = output[0] if isinstance(output, tuple) else output

        return store

    def _input_hook(self):
        def store(_module, args, kwargs):
            self.captured[0] = args[0] if args else kwargs["hidden_states"]

        return store

    def features(self) -> torch.Tensor:
        """The last forward's fused input for the draft (`fused`)."""
        return fused([self.captured[i][0] for i in self.indices])

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
