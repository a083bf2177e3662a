"""A request resolved once against the loaded pair: what the engine runs and what the run stores.

`ReplayRequest` (backend/run/request.py) validates what the user gave, CLI flags or page
widgets, before any model loads. `resolve` then decides, in one place, everything that needs the
loaded pair: the engine's reading of the draft and the wiring it feeds (the override, else that
reading's), the prompt's ids, the tree shape after SGLang's rewrites and the acceptance rule, the
engine's `ReplayConfig`, and every warning. The job runner, compare, evaluate and the CLI all replay
a `ReplayPlan`; nothing downstream looks at the request's raw flags again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from backend import BadInput
from backend.drafts.dflash_config import DFLASH
from backend.drafts.dflash_readings import block_note
from backend.drafts.readings import EngineView, reading_of
from backend.engine.preflight import PreflightReport, context_check
from backend.engine.replay import ReplayConfig
from backend.engine.sampling import Sampling
from backend.run.request import Decoding, ReplayRequest
from backend.run.run_value import Resolved, describe_mode
from backend.run.stop_ids import llamacpp_stop_ids
from backend.run.wiring import Wiring
from backend.target.dispatch import placement


@dataclass(frozen=True)
class ReplayPlan:
    request: ReplayRequest
    view: EngineView  # whose reading of the draft runs
    wiring: Wiring  # the HF indices fed to the draft (the override, else the reading's)
    decoding: Decoding  # the effective tree shape, the acceptance rule, the rewrites
    config: ReplayConfig  # what the engine runs
    prompt_ids: tuple[int, ...]
    warnings: tuple[str, ...]  # preflight, context, the reading's and the decoding's notes
    method: str = "eagle3"  # the draft's: eagle3, or dflash

    def resolved(self, target) -> Resolved:
        """What the loaded pair made of the request (stored with the run beside the request)."""
        config, decoding = self.config, self.decoding
        return Resolved(
            engine=self.view.engine,
            wiring_source=self.wiring.source,
            draft_math=asdict(self.view.math),
            num_steps=config.num_steps,
            topk=config.topk,
            num_draft_tokens=config.num_draft_tokens,
            sampling_rule=None if decoding.greedy else decoding.rule,
            draft_attention=config.draft_attention if config.topk > 1 else None,
            mode=(
                f"DFlash blocks of {config.num_steps + 1}, "  # where-lost says what a block's slot is
                + ("greedy" if decoding.greedy else f"sampled ({decoding.rule})")
                if self.method == DFLASH
                else describe_mode(config.topk, config.num_draft_tokens, decoding.greedy, self.request)
            )
            + (
                ", expected over the trace's greedy path"
                if self.request.via == "trace" and not decoding.greedy
                else ""
            ),
            device=str(target.device),
            dtype=str(target.dtype).replace("torch.", ""),
            target_placement=placement(target.model),
            # whose arithmetic ran the target: SpecLens's lean forward (checked against transformers' when
            # the target was loaded, backend/target/lean_target.py), transformers' own, or a trace's
            target_forward=target.runner.described,
            decoding_notes=tuple(decoding.notes),
            draft_method=self.method,
        )


def resolve(
    request: ReplayRequest,
    target,
    draft,
    report: PreflightReport | None = None,
    override: Wiring | None = None,
) -> ReplayPlan:
    """`request` against the loaded `target` and `draft` (`report`: the draft's preflight, for its
    warnings; `override`: the request's wiring override as `checked_override` made it)."""
    view, wiring = reading_of(request.engine, override, draft, target.num_layers)
    ids = prompt_ids(request, target.tokenizer)
    decoding = request.decoding(target_architecture(target))
    stop_ids = frozenset() if request.ignore_eos else None  # nothing ends it before max new tokens
    if view.accounting == "llamacpp":
        if decoding.shape.topk > 1 or not decoding.greedy:
            raise BadInput(
                "llama.cpp's reading replays its greedy chain (topk 1, temperature 0): llama-server "
                "drafts no tree, and its sampled verification is not replayed"
            )
        stop_ids = llamacpp_stop_ids(target.tokenizer, target.eos_token_ids)
    num_steps, method = request.num_steps, getattr(draft.config, "method", "eagle3")
    if method == DFLASH and view.accounting == "llamacpp" and num_steps > draft.config.num_drafts:
        num_steps = (
            draft.config.num_drafts
        )  # common/speculative.cpp's constructor clamps n_max, with a log line
    config = ReplayConfig(
        num_steps,
        request.max_new_tokens,
        record=request.record,
        math=view.math,
        topk=decoding.shape.topk,
        num_draft_tokens=decoding.shape.num_draft_tokens if num_steps == request.num_steps else num_steps + 1,
        sampling=Sampling(
            request.temperature, request.top_p, request.top_k, request.seed, rule=decoding.rule
        ),
        draft_attention=request.draft_attention,
        accounting=view.accounting,
        stop_ids=stop_ids,
    )
    length = len(ids) + request.max_new_tokens
    if config.uses_tree_path:
        check_tree_mask_supported(target, length)
    check_target_context(target, len(ids), request.max_new_tokens)
    warnings = [*preflight_warnings(report, draft, length), *view.notes]
    if request.via == "trace" and not decoding.greedy:
        warnings.append(
            "over a trace the rounds follow the target's greedy path (what a trace holds); each step's acceptance "
            "is its expectation at this temperature, from the trace's top 8 log-probabilities renormalised (exact "
            "with --top-k 8 or less), not a draw: read the expected accept length"
        )
    warnings += [note for note in decoding.notes if note not in warnings]
    if method == DFLASH:
        if num_steps != request.num_steps:
            warnings.append(
                f"llama.cpp clamps --spec-draft-n-max {request.num_steps} to {num_steps} (the draft's block_size "
                f"{draft.config.block_size} - 1; common/speculative.cpp): replayed with K = {num_steps}"
            )
        if config.topk > 1:
            raise BadInput("a DFlash draft proposes one block per step (topk 1): no tree to replay")
        warnings += [note for note in [block_note(draft.config, config.num_steps)] if note]
    return ReplayPlan(request, view, wiring, decoding, config, tuple(ids), tuple(warnings), method)


def prompt_ids(request: ReplayRequest, tokenizer) -> list[int]:
    """The request's prompt as ids: its ids as they are, or its text tokenized (behind the target's
    chat template when it asks for it)."""
    if request.prompt_ids is not None:
        return list(request.prompt_ids)
    if tokenizer is None:
        from backend.engine.loading import tokenizer_problem

        raise BadInput(f"{tokenizer_problem(request.target)}; use a sample's token ids instead")
    if request.chat_template:
        from backend.data.conversations import user_prompt_ids

        ids = user_prompt_ids(tokenizer, request.prompt_text)
    else:
        ids = tokenizer(request.prompt_text)["input_ids"]
    if not ids:
        raise BadInput("the prompt tokenizes to nothing")
    return ids


def target_architecture(target) -> str | None:
    architectures = getattr(target.model.config, "architectures", None) or [None]
    return architectures[0]


def check_tree_mask_supported(target, sequence_length: int) -> None:
    """A tree verify passes transformers a custom 4D mask, which sliding-window layers then apply
    as given (full attention): exact only while the sequence fits the window."""
    window = getattr(target.model.config, "sliding_window", None)
    if window and sequence_length > window:
        raise BadInput(
            f"{target.path}: trees and sampled replays verify under a custom attention mask, which "
            f"this target's sliding-window layers (window {window}) would apply as full attention; "
            f"keep prompt + max new tokens <= {window} (asked {sequence_length})"
        )


def check_target_context(target, prompt_length: int, max_new_tokens: int) -> None:
    """Prompt + max new tokens must fit the target's context (max_position_embeddings): positions past
    it were never trained. vLLM refuses max_tokens beyond its context and clamps a budget the prompt
    pushes past it (vllm/renderers/params.py `__post_init__`, "Please request fewer output tokens");
    a replay asks for the budget it can run instead of running another one."""
    limit = getattr(target.model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and prompt_length + max_new_tokens > limit:
        raise BadInput(
            f"{target.path}: prompt {prompt_length} + max new tokens {max_new_tokens} = "
            f"{prompt_length + max_new_tokens} exceeds the target's context (max_position_embeddings {limit}); "
            f"ask for at most {max(0, limit - prompt_length)} new tokens"
        )


def preflight_warnings(report: PreflightReport | None, draft, sequence_length: int) -> list[str]:
    checks = [] if report is None else report.warnings()
    checks += [c for c in [context_check(draft.config, sequence_length)] if c.status == "warn"]
    return [f"{c.name}: {c.message}" for c in checks]
