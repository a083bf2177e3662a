"""The shape of a speculative step, and SGLang's rules for the flags that set it (torch-free, so
requests and pages can use it; docs/reference.md §12).

Flags: `--speculative-num-steps` S (draft depth), `--speculative-eagle-topk` k (children per
frontier node), `--speculative-num-draft-tokens` N (verified tokens, the root included).
"""

from __future__ import annotations

from dataclasses import dataclass

# SGLang server_args.py `auto_choose_speculative_params`: (steps, topk, draft tokens) when no flag is given.
SGLANG_AUTO_LLAMA = (5, 4, 8)
SGLANG_AUTO_OTHER = (3, 1, 4)
DRAFT_ATTENTION = ("ancestors", "sglang-slots")


@dataclass(frozen=True)
class TreeShape:
    num_steps: int  # S: draft depth
    topk: int = 1  # k
    num_draft_tokens: int | None = None  # N: verified tokens, the root included

    @property
    def max_candidates(self) -> int:
        return self.topk + (self.num_steps - 1) * self.topk**2


def sglang_shape(
    num_steps: int | None, topk: int | None, num_draft_tokens: int | None, architecture: str | None = None
) -> tuple[TreeShape, list[str]]:
    """The shape SGLang runs for the requested flags, and one note per rewrite it made
    (server_args.py `ServerArgs._handle_speculative_decoding`). ValueError where SGLang refuses."""
    notes: list[str] = []
    if num_steps is None:
        if topk is not None or num_draft_tokens is not None:
            raise ValueError(
                "SGLang requires --speculative-num-steps when topk or num-draft-tokens is given "
                "(server_args.py _handle_speculative_decoding asserts it)"
            )
        chosen = SGLANG_AUTO_LLAMA if architecture == "LlamaForCausalLM" else SGLANG_AUTO_OTHER
        num_steps, topk, num_draft_tokens = chosen
        notes.append(
            f"no speculative flags: SGLang's auto_choose_speculative_params picks steps={num_steps}, "
            f"topk={topk}, draft tokens={num_draft_tokens} for {architecture or 'this target'}"
        )
    topk = 1 if topk is None else topk
    if num_steps < 1 or topk < 1:
        raise ValueError(f"num_steps and topk must be >= 1, got {num_steps} and {topk}")
    if topk == 1 and num_draft_tokens != num_steps + 1:
        if num_draft_tokens is not None:
            notes.append(
                f"topk 1: SGLang rewrites num_draft_tokens {num_draft_tokens} -> {num_steps + 1} "
                "(num_steps + 1; server_args.py _handle_speculative_decoding)"
            )
        num_draft_tokens = num_steps + 1
    if num_draft_tokens is None:
        raise ValueError("topk > 1 needs --num-draft-tokens (SGLang's --speculative-num-draft-tokens)")
    shape = TreeShape(num_steps, topk, num_draft_tokens)
    if num_draft_tokens < 2:
        raise ValueError(f"num_draft_tokens must be >= 2 (the root and one draft), got {num_draft_tokens}")
    if num_draft_tokens - 1 > shape.max_candidates:
        raise ValueError(
            f"num_draft_tokens {num_draft_tokens} needs {num_draft_tokens - 1} candidates but steps="
            f"{num_steps}, topk={topk} draft only {shape.max_candidates} (topk + (steps-1)*topk^2): "
            "SGLang fails inside torch.topk in organize_draft_results"
        )
    return shape, notes
