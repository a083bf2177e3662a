"""The shape of a speculative step, and SGLang's rules for the flags that set it (torch-free, so
requests and pages can use it; docs/reference.md §12).

Flags: `--speculative-num-steps` S (draft depth), `--speculative-eagle-topk` k (children per
frontier node), `--speculative-num-draft-tokens` N (verified tokens, the root included).
"""

from __future__ import annotations

from dataclasses import dataclass

# SGLang python/sglang/srt/server_args.py `auto_choose_speculative_params` (later
# `ServerArgs._auto_choose_speculative_params`): (steps, topk, draft tokens) when no flag is given, by
# the target's architecture. Every release read gives Llama and unlisted architectures (5, 4, 8);
# DeepSeek V2/V3 get (3, 1, 4) (one early release gave them (5, 4, 8) too), and newer releases add
# GptOss and Bailing MoE to (3, 1, 4) and give the STANDALONE algorithm (3, 1, 4).
SGLANG_AUTO_DEFAULT = (5, 4, 8)
SGLANG_AUTO_CHAIN = (3, 1, 4)
SGLANG_AUTO_CHAIN_ARCHITECTURES = (
    "DeepseekV3ForCausalLM",
    "DeepseekV2ForCausalLM",
    "GptOssForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
)
DRAFT_ATTENTION = ("ancestors", "sglang-slots")


@dataclass(frozen=True)
class TreeShape:
    num_steps: int  # S: draft depth
    topk: int = 1  # k
    num_draft_tokens: int | None = None  # N: verified tokens, the root included

    @property
    def max_candidates(self) -> int:
        return self.topk + (self.num_steps - 1) * self.topk**2


@dataclass(frozen=True)
class Rewrite:
    """One change SGLang makes to the requested flags, or refuses: `code` names the rule (the lint's
    finding code), `message` says it."""

    code: str
    message: str


def sglang_auto(architecture: str | None) -> tuple[int, int, int]:
    return SGLANG_AUTO_CHAIN if architecture in SGLANG_AUTO_CHAIN_ARCHITECTURES else SGLANG_AUTO_DEFAULT


def sglang_shape(
    num_steps: int | None, topk: int | None, num_draft_tokens: int | None, architecture: str | None = None
) -> tuple[TreeShape, list[str]]:
    """The shape SGLang runs for the requested flags, and one note per rewrite it made. ValueError
    where SGLang refuses (`sglang_rewrites`)."""
    shape, rewrites = sglang_rewrites(num_steps, topk, num_draft_tokens, architecture)
    return shape, [r.message for r in rewrites]


def sglang_rewrites(
    num_steps: int | None, topk: int | None, num_draft_tokens: int | None, architecture: str | None = None
) -> tuple[TreeShape, list[Rewrite]]:
    """The one implementation of SGLang's flag rules (server_args.py
    `ServerArgs._handle_speculative_decoding`): the lint and the replay both call it."""
    notes: list[Rewrite] = []
    if num_steps is None:
        if topk is not None or num_draft_tokens is not None:
            raise ValueError(
                "SGLang requires --speculative-num-steps when --speculative-eagle-topk or "
                "--speculative-num-draft-tokens is given (server_args.py _handle_speculative_decoding asserts it "
                "and the server does not start)"
            )
        num_steps, topk, num_draft_tokens = sglang_auto(architecture)
        notes.append(
            Rewrite(
                "defaults-by-architecture",
                f"no speculative flags: SGLang's auto_choose_speculative_params picks steps={num_steps}, "
                f"topk={topk}, draft tokens={num_draft_tokens} for {architecture or 'this target'}",
            )
        )
    topk = 1 if topk is None else topk
    if num_steps < 1 or topk < 1:
        raise ValueError(f"num_steps and topk must be >= 1, got {num_steps} and {topk}")
    if topk == 1 and num_draft_tokens != num_steps + 1:
        if num_draft_tokens is not None:
            notes.append(
                Rewrite(
                    "topk1-draft-tokens-reset",
                    f"with topk 1 (a chain) SGLang rewrites num_draft_tokens {num_draft_tokens} -> {num_steps + 1} "
                    "(num_steps + 1; server_args.py _handle_speculative_decoding), logging only a warning",
                )
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


def sglang_flags(num_steps: int, topk: int, num_draft_tokens: int) -> str:
    """A shape as SGLang's command line writes it."""
    return (
        f"--speculative-num-steps {num_steps} --speculative-eagle-topk {topk} "
        f"--speculative-num-draft-tokens {num_draft_tokens}"
    )
