"""What a user asks for, built once by a page or the CLI and run by the service.

A `ReplayRequest` is frozen and validated when it is made: a bad override, K or limit is a BadInput
before any job starts. Against the loaded pair it is resolved once (backend/service/plan.py
`resolve`, which asks `reading_for` for the reading and the wiring), and the plan is stored with the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from backend import BadInput
from backend.engine.readings import ENGINES, EngineView, read_as
from backend.engine.shapes import DRAFT_ATTENTION, TreeShape, sglang_shape
from backend.engine.wiring import Wiring, check_override, fed_wiring

MAX_STEPS = 64
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 256
ENGINE_CHOICES = ("auto", *ENGINES)  # whose reading of the draft a replay runs


@dataclass(frozen=True)
class Decoding:
    """A request's effective drafting and acceptance (see ReplayRequest.decoding)."""

    shape: TreeShape
    rule: str  # whose sampling acceptance rule: sglang | vllm
    greedy: bool
    requested: dict  # the flags as asked for
    notes: list[str] = field(default_factory=list)  # every rewrite and every engine disagreement


@dataclass(frozen=True)
class ReplayRequest:
    target: str  # target model directory
    draft: str  # draft directory
    prompt_ids: tuple[int, ...] | None = None  # token ids, used as they are (no template, no BOS)
    prompt_text: str | None = None  # or text, tokenized with the target's tokenizer
    chat_template: bool = False  # prompt_text as one user message behind the target's chat template
    num_steps: int = 4  # K
    max_new_tokens: int = 128
    aux_hf_indices: tuple[int, ...] | None = None  # wiring override (HF indices); None = declared
    record: bool = True
    sample_ref: str | None = None  # "file#index", "dataset 1 #3" or "prompt"
    sample_id: int | None = None
    device: str | None = None
    dtype: str | None = None
    engine: str = "auto"  # whose reading of the draft to run (backend/engine/readings.py); auto = training
    topk: int | None = None  # SGLang --speculative-eagle-topk (None: 1, a chain)
    num_draft_tokens: int | None = None  # SGLang --speculative-num-draft-tokens (None: steps + 1)
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: every token
    seed: int = 0
    draft_attention: str = "ancestors"  # trees: true ancestors, or SGLang's per-rank KV slots
    device_map: str | None = None  # split the target across devices (backend/engine/dispatch.py)
    max_memory: str | None = None  # per-device limits for device_map, e.g. "0=20GiB,cpu=64GiB"

    def __post_init__(self):
        """Every value the user gave, checked here once: a bad one is a BadInput before any model
        loads. The prompt, the drafting flags (K, N, topk, wiring, engine, draft attention) and the
        sampling flags each have their checks; SGLang's flag rules run last (`decoding`)."""
        self._check_prompt()
        self._check_drafting()
        self._check_sampling()
        object.__setattr__(self, "prompt_ids", None if self.prompt_ids is None else tuple(self.prompt_ids))
        if self.aux_hf_indices is not None:
            object.__setattr__(self, "aux_hf_indices", tuple(self.aux_hf_indices))
        self.decoding()  # SGLang's flag rules refuse here, before any model loads

    def _check_prompt(self) -> None:
        if (self.prompt_ids is None) == (self.prompt_text is None):
            raise BadInput("a replay needs exactly one of prompt ids or prompt text")
        if (self.prompt_ids is not None and not self.prompt_ids) or (
            self.prompt_text is not None and not self.prompt_text.strip()
        ):
            raise BadInput("the prompt is empty")
        if self.chat_template and self.prompt_text is None:
            raise BadInput(
                "the chat template applies to prompt text, not to token ids (they are used as they are)"
            )
        if self.max_new_tokens < 1:
            raise BadInput(f"max new tokens must be >= 1, got {self.max_new_tokens}")

    def _check_drafting(self) -> None:
        if not 1 <= self.num_steps <= MAX_STEPS:
            raise BadInput(f"K (draft steps) must be in 1..{MAX_STEPS}, got {self.num_steps}")
        if self.aux_hf_indices is not None:
            check_override(self.aux_hf_indices)
        if self.engine not in ENGINE_CHOICES:
            raise BadInput(f"unknown engine {self.engine!r}; use auto or one of {', '.join(ENGINES)}")
        if self.topk is not None and not 1 <= self.topk <= MAX_TOPK:
            raise BadInput(f"topk must be in 1..{MAX_TOPK}, got {self.topk}")
        if self.num_draft_tokens is not None and not 2 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS:
            raise BadInput(f"num draft tokens must be in 2..{MAX_DRAFT_TOKENS}, got {self.num_draft_tokens}")
        if self.draft_attention not in DRAFT_ATTENTION:
            raise BadInput(f"draft attention must be one of {', '.join(DRAFT_ATTENTION)}")

    def _check_sampling(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise BadInput(f"temperature must be a number >= 0, got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise BadInput(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise BadInput(f"top_k must be >= 1, or 0 / -1 for every token, got {self.top_k}")
        if not 0 <= self.seed < 2**63:
            raise BadInput(f"seed must be in 0..2^63-1, got {self.seed}")

    def decoding(self, architecture: str | None = None) -> Decoding:
        """How the replay drafts and accepts: SGLang's shape rules applied to the requested flags
        (requested and effective values both kept), and whose acceptance rule samples."""
        try:
            shape, notes = sglang_shape(self.num_steps, self.topk, self.num_draft_tokens, architecture)
        except ValueError as error:
            raise BadInput(str(error)) from None
        greedy = self.temperature == 0 or self.top_k == 1
        if self.temperature > 0 and self.top_k == 1:
            notes.append("top_k 1 is greedy: SGLang's SamplingParams treats it so (is_all_greedy)")
        if self.engine == "vllm":
            if shape.topk > 1:
                raise BadInput(
                    "vLLM verifies chains only: its rejection sampler (vllm/v1/sample/rejection_sampler.py) "
                    "is not tree-aware and its --speculative-token-tree drafting is experimental; "
                    "replay trees as SGLang runs them (--engine sglang or auto)"
                )
            rule = "vllm"
        else:
            rule = "sglang"
            if not greedy and self.engine != "sglang":
                notes.append(
                    "sampled acceptance follows SGLang's rule (tree_speculative_sampling_target_only); "
                    "vLLM's chain rule accepts with the same probabilities but different random draws"
                )
        if shape.topk > 1 and self.draft_attention == "ancestors":
            notes.append(
                "tree drafts attend to their true ancestors; SGLang's draft forwards read per-rank KV "
                "slots instead (--draft-attention sglang-slots replays that)"
            )
        requested = {
            "num_steps": self.num_steps,
            "topk": self.topk,
            "num_draft_tokens": self.num_draft_tokens,
        }
        return Decoding(shape, rule, greedy, requested, notes)

    def reading_for(self, draft, num_target_layers: int) -> tuple[EngineView, Wiring]:
        """The engine's view of the loaded draft and the HF indices this request feeds it."""
        return reading_of(self.engine, self.aux_hf_indices, draft, num_target_layers)

    def prompt_for(self, tokenizer) -> list[int]:
        if self.prompt_ids is not None:
            return list(self.prompt_ids)
        if tokenizer is None:
            raise BadInput(f"target {self.target} has no tokenizer; use a sample's token ids instead")
        if self.chat_template:
            from backend.data.conversations import user_prompt_ids

            ids = user_prompt_ids(tokenizer, self.prompt_text)
        else:
            ids = tokenizer(self.prompt_text)["input_ids"]
        if not ids:
            raise BadInput("the prompt tokenizes to nothing")
        return ids

    @property
    def label(self) -> str:
        from pathlib import Path

        override = f" wiring HF {list(self.aux_hf_indices)}" if self.aux_hf_indices else ""
        engine = "" if self.engine == "auto" else f" as {self.engine}"
        tree = f" topk={self.topk} N={self.num_draft_tokens}" if (self.topk or 1) > 1 else ""
        sampled = f" T={self.temperature:g} seed={self.seed}" if self.temperature > 0 else ""
        return (
            f"{Path(self.draft).name} K={self.num_steps}{tree}{sampled}{engine}{override} "
            f"on {self.sample_ref or 'prompt'}"
        )


def reading_of(engine: str, override, draft, num_target_layers: int) -> tuple[EngineView, Wiring]:
    """`engine`'s view of the loaded draft and the HF indices it is fed: the `override` (checked
    against the target's depth in wiring.override_wiring), else what that engine reads (checked in the
    readings). BadInput when that engine cannot run the draft. The one place a replay, the teacher
    and the probe decide what feeds the draft."""
    view = read_as(
        engine,
        draft.config,
        num_target_layers,
        draft.own_embedding is not None,
        getattr(draft, "own_embedding_differs", None),
    )
    return view, fed_wiring(view, override, num_target_layers)
