"""What a user asks for, built once by a page or the CLI and run by the service.

A `ReplayRequest` is frozen and validated when it is made: a bad override, K or limit is a BadInput
before any job starts. Its wiring is resolved once, against the loaded draft's config and the
target's depth (`wiring_for`), and stored with the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend import BadInput
from backend.engine.readings import ENGINES, EngineView, read_as
from backend.engine.wiring import Wiring, check_indices, resolve_wiring

MAX_STEPS = 64
ENGINE_CHOICES = ("auto", *ENGINES)  # whose reading of the draft a replay runs


@dataclass(frozen=True)
class ReplayRequest:
    target: str  # target model directory
    draft: str  # draft directory
    prompt_ids: tuple[int, ...] | None = None  # token ids, used as they are (no template, no BOS)
    prompt_text: str | None = None  # or text, tokenized with the target's tokenizer
    num_steps: int = 4  # K
    max_new_tokens: int = 128
    aux_hf_indices: tuple[int, ...] | None = None  # wiring override (HF indices); None = declared
    record: bool = True
    sample_ref: str | None = None  # "file#index", "dataset 1 #3" or "prompt"
    sample_id: int | None = None
    device: str | None = None
    dtype: str | None = None
    engine: str = "auto"  # whose reading of the draft to run (backend/engine/readings.py); auto = training

    def __post_init__(self):
        if (self.prompt_ids is None) == (self.prompt_text is None):
            raise BadInput("a replay needs exactly one of prompt ids or prompt text")
        if self.prompt_ids is not None and not self.prompt_ids:
            raise BadInput("the prompt is empty")
        if self.prompt_text is not None and not self.prompt_text.strip():
            raise BadInput("the prompt is empty")
        if not 1 <= self.num_steps <= MAX_STEPS:
            raise BadInput(f"K (draft steps) must be in 1..{MAX_STEPS}, got {self.num_steps}")
        if self.max_new_tokens < 1:
            raise BadInput(f"max new tokens must be >= 1, got {self.max_new_tokens}")
        if self.aux_hf_indices is not None:
            if len(self.aux_hf_indices) != 3 or any(i < 0 for i in self.aux_hf_indices):
                raise BadInput(f"a wiring override is three HF indices >= 0, got {list(self.aux_hf_indices)}")
        object.__setattr__(self, "prompt_ids", None if self.prompt_ids is None else tuple(self.prompt_ids))
        if self.aux_hf_indices is not None:
            object.__setattr__(self, "aux_hf_indices", tuple(self.aux_hf_indices))
        if self.engine not in ("auto", *ENGINES):
            raise BadInput(f"unknown engine {self.engine!r}; use auto or one of {', '.join(ENGINES)}")

    def reading_for(self, draft, num_target_layers: int) -> tuple[EngineView, Wiring]:
        """The engine's view of the loaded draft and the HF indices this request feeds it: the
        override, else what that engine reads. BadInput when that engine cannot run the draft."""
        view = read_as(
            self.engine,
            draft.config,
            num_target_layers,
            draft.own_embedding is not None,
            getattr(draft, "own_embedding_differs", None),
        )
        if self.aux_hf_indices is not None:
            wiring = resolve_wiring(draft.config, num_target_layers, self.aux_hf_indices)
        elif not view.loads:
            raise BadInput(view.refusal)
        else:
            wiring = view.wiring
        check_indices(wiring.aux_hf_indices, num_target_layers)
        return view, wiring

    def prompt_for(self, tokenizer) -> list[int]:
        if self.prompt_ids is not None:
            return list(self.prompt_ids)
        if tokenizer is None:
            raise BadInput(f"target {self.target} has no tokenizer; use a sample's token ids instead")
        ids = tokenizer(self.prompt_text)["input_ids"]
        if not ids:
            raise BadInput("the prompt tokenizes to nothing")
        return ids

    @property
    def label(self) -> str:
        from pathlib import Path

        override = f" wiring HF {list(self.aux_hf_indices)}" if self.aux_hf_indices else ""
        engine = "" if self.engine == "auto" else f" as {self.engine}"
        return (
            f"{Path(self.draft).name} K={self.num_steps}{engine}{override} on {self.sample_ref or 'prompt'}"
        )
