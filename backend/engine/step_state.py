"""The state one verify step reads and leaves: the replay's settings (ReplayConfig), the two caches,
the cursor, the draft's catch-up over the committed positions, and committing within the budget.

Chain steps (chain_step.py) and tree steps (tree_step.py) share these; replay.py runs the loop."""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import accumulate

import torch

from backend.drafts.engine_readers import DraftMath
from backend.engine.draft_model import Eagle3Draft
from backend.engine.penalties import NONE as NO_PENALTIES
from backend.engine.penalties import Penalties
from backend.engine.sampling import GREEDY, Sampling
from backend.run.shapes import DRAFT_ATTENTION, TreeShape
from backend.target.kv_cache import KVCache

# How many tokens a step drafts and which steps count, by engine (readings.EngineView.accounting):
# - "fixed-k": K drafts every step; what passes max_new_tokens or an EOS is cut (SGLang, vLLM, HF);
# - "llamacpp": llama-server drafts min(K, tokens left - 1) (tools/server/server-context.cpp
#   server_slot::get_n_draft_max: n_remaining() - 1), and with one token left it decodes without a
#   draft: a plain decode, not a verify step (update_slots counts n_draft_verif_steps only where
#   spec_draft is not empty); a drafted end-of-generation token ends the accepted prefix unless it is
#   the last draft (common/sampling.cpp common_sampler_sample_and_accept_n), so it comes out as the
#   target's own token; and generation stops at any of its end-of-generation ids (`stop_ids`).
ACCOUNTING = ("fixed-k", "llamacpp")


@dataclass(frozen=True)
class ReplayConfig:
    num_steps: int = 4  # K: drafted tokens per verify step
    max_new_tokens: int = 128
    record: bool = True  # probabilities, top-k alternatives and hidden states
    top_alternatives: int = 5
    math: DraftMath | None = None  # the draft's math under an engine's reading (None: the training reading)
    topk: int = 1  # k: children per frontier node (1: a chain)
    num_draft_tokens: int | None = None  # N: verified tokens incl. the root (SGLang's effective value)
    sampling: Sampling = GREEDY
    draft_attention: str = "ancestors"  # tree drafts: true ancestors, or SGLang's per-rank KV slots
    force_tree: bool = False  # run a chain through the tree path (tests: topk 1 equals the chain)
    penalties: Penalties = NO_PENALTIES  # on the target when it verifies (and the draft if on_draft)
    accounting: str = "fixed-k"  # ACCOUNTING
    stop_ids: frozenset[int] | None = None  # end-of-generation ids (None: the target's EOS ids)

    def __post_init__(self):
        if self.num_steps < 1:
            raise ValueError("num_steps (K) must be >= 1")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if self.topk < 1:
            raise ValueError("topk must be >= 1")
        if self.num_draft_tokens is None:
            if self.topk > 1:
                raise ValueError("topk > 1 needs num_draft_tokens")
            object.__setattr__(self, "num_draft_tokens", self.num_steps + 1)
        if self.topk == 1 and self.num_draft_tokens != self.num_steps + 1:
            raise ValueError("a chain (topk 1) verifies num_steps + 1 tokens")
        if not 2 <= self.num_draft_tokens <= self.shape.max_candidates + 1:
            raise ValueError(
                f"num_draft_tokens must be in 2..{self.shape.max_candidates + 1} for steps="
                f"{self.num_steps}, topk={self.topk}"
            )
        if self.penalties.active and self.uses_tree_path:
            raise ValueError("sampling penalties replay on the greedy chain only (topk 1, temperature 0)")
        if self.draft_attention not in DRAFT_ATTENTION:
            raise ValueError(f"draft_attention must be one of {', '.join(DRAFT_ATTENTION)}")
        if self.accounting not in ACCOUNTING:
            raise ValueError(f"accounting must be one of {', '.join(ACCOUNTING)}")
        if self.accounting == "llamacpp" and self.uses_tree_path:
            raise ValueError("llama.cpp's reading replays its greedy chain only (topk 1, temperature 0)")

    def drafts_at(self, produced: int) -> int:
        """How many tokens a step drafts with `produced` tokens out (0: a plain decode)."""
        if self.accounting == "llamacpp":
            return max(0, min(self.num_steps, self.max_new_tokens - produced - 1))
        return self.num_steps

    def stops(self, eos_ids) -> set[int]:
        """The ids that end the generation: `stop_ids` when the reading names them, else the target's EOS."""
        return set(eos_ids) if self.stop_ids is None else set(self.stop_ids)

    @property
    def shape(self) -> TreeShape:
        return TreeShape(self.num_steps, self.topk, self.num_draft_tokens)

    @property
    def uses_tree_path(self) -> bool:
        return self.topk > 1 or not self.sampling.greedy or self.force_tree


@dataclass(frozen=True)
class Caches:
    """The two KV caches of one replay: the target's (its runner's) and the draft's."""

    target: object
    draft: KVCache


@dataclass
class Cursor:
    """Where the decode stands: the pending token x_n at position n, and what the draft must catch
    up on (the features and next tokens of the positions the target committed last)."""

    position: int
    pending: int
    produced: int
    catch_up_features: torch.Tensor
    catch_up_tokens: list[int]
    catch_up_start: int

    def after(self, emitted: list[int], committed: list[int], features: torch.Tensor) -> Cursor:
        """The cursor after a verify step that accepted len(emitted) - 1 drafts and emitted `emitted`
        (the accepted drafts and the bonus, which becomes the pending token), `committed` of them within
        the budget; the draft catches up next on the step's verify rows (`features`: their fused aux
        features) from this step's position."""
        return Cursor(
            self.position + len(emitted),
            emitted[-1],
            self.produced + len(committed),
            features,
            emitted,
            self.position,
        )


def draft_catch_up(
    draft: Eagle3Draft, cache: KVCache, cursor: Cursor, math: DraftMath | None = None
) -> torch.Tensor:
    """1. Run the draft over committed positions with (A_p, x_{p+1}); return the last output hidden
    [1, H], from which d_1 is read."""
    return draft_catch_ups(draft, [cache], [cursor], math)


def draft_catch_ups(
    draft: Eagle3Draft, caches: list[KVCache], cursors: list[Cursor], math: DraftMath | None = None
) -> torch.Tensor:
    """1 for B sequences in one draft forward (their positions packed one after another, each on
    its own cache: the batched replay); each one's last output hidden [B, H]."""
    lengths = [len(cursor.catch_up_tokens) for cursor in cursors]
    features = (
        cursors[0].catch_up_features
        if len(cursors) == 1
        else torch.cat([c.catch_up_features for c in cursors])
    )
    device = features.device
    tokens = torch.tensor([token for cursor in cursors for token in cursor.catch_up_tokens], device=device)
    positions = torch.cat(
        [
            torch.arange(c.catch_up_start, c.catch_up_start + n, device=device)
            for c, n in zip(cursors, lengths, strict=True)
        ]
    )
    fused = draft.fuse(features, math)
    if len(caches) == 1:
        return draft(fused, tokens, positions, caches[0], math=math)[-1:]
    hidden = draft(fused, tokens, positions, caches, math=math, lengths=lengths)
    return hidden[[end - 1 for end in accumulate(lengths)]]


def commit_within_budget(
    emitted: list[int], produced: int, eos: set[int], max_new_tokens: int
) -> tuple[list[int], bool]:
    """6. The emitted tokens that fit: up to and including an EOS, at most max_new_tokens in all.
    Returns (committed, finished)."""
    committed = []
    for token in emitted:
        committed.append(token)
        if token in eos or produced + len(committed) >= max_new_tokens:
            return committed, True
    return committed, False


def elapsed_ms(started: float, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) * 1000.0
