"""Serving-flag lint: what an SGLang launch command or vLLM arguments will really run with this draft.

Rules follow docs/reference.md §9 (SGLang flags that silently change what runs) and
§2 (which config field, in which convention, each engine reads the aux layer ids from).
Each finding has a severity (error: acceptance is lost or the draft is misused; warning: likely
loss; info: worth knowing), a stable code, an explanation and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from backend import BadInput
from backend.data.serving_command import (
    VLLM_K_BY_LOAD,
    ServingSettings,
    TargetFacts,
    parse_sglang,
    parse_vllm,
    target_facts,
)
from backend.data.serving_rewrite import rewrite as rewrite_command
from backend.diagnostics.findings import Finding, severity
from backend.diagnostics.lint_dflash import dflash_config_of, dflash_findings
from backend.diagnostics.lint_result import LintReport
from backend.diagnostics.lint_wiring import aux_ids, aux_ids_against
from backend.diagnostics.serving_features import (
    feature_rules,
    generation_defaults,
    read_request_bodies,
    request_features,
    served_penalties,
)
from backend.drafts.dflash_config import is_dflash
from backend.drafts.draft_config import DraftConfig, read_draft_config
from backend.drafts.layouts import to_internal_names
from backend.drafts.safetensors_header import tensor_shapes
from backend.run.shapes import SGLANG_AUTO_CHAIN, SGLANG_AUTO_DEFAULT, sglang_flags, sglang_rewrites

SGLANG_MAX_RUNNING_REQUESTS = 48
PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")  # only torch reads these
DEFAULT_CHAIN_K = 3  # the chain every fix recommends when no run of the draft says better
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3Speculator")


# ----------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class DraftFacts:
    config: DraftConfig
    has_d2t: bool
    fc_input_width: int | None  # fc.weight's input width: 3*Ht for EAGLE-3

    @property
    def is_eagle3(self) -> bool:
        if self.fc_input_width is not None:
            return self.fc_input_width == 3 * self.config.target_hidden_size
        return (
            self.config.architecture in EAGLE3_ARCHITECTURES
            or self.config.nested_aux_ids is not None
            or self.config.top_level_aux_ids is not None
        )


def lint(
    settings: ServingSettings,
    draft: DraftFacts,
    target: TargetFacts,
    trained_hf: list[int] | None = None,
    trained_ties: list[list[int]] | None = None,
    requests: dict | None = None,
    chain_k: tuple[int, str] | None = None,
) -> LintReport:
    """`chain_k`: the chain length to recommend and why (the Speed-up what-if's best K on a run of this
    draft; default DEFAULT_CHAIN_K). `requests`: serving_features.request_features of the request bodies,
    when given. `trained_hf`: the HF indices the draft was trained on, when a check found them (the wiring probe's
    best); `trained_ties`: wirings the probe could not tell from it on its samples. Without them the
    wiring findings take the declared wiring as the trained one."""
    config = draft.config
    findings: list[Finding] = []
    edits: dict = {}
    edited: list[str] = []

    def add(word: str, code: str, message: str, fix: str, edit: dict | None = None) -> None:
        """A finding in the lint's words; `edit`: what its fix changes on the command line."""
        findings.append(Finding(code, severity(word), message, fix=fix))
        if edit:
            edits.update(edit)
            edited.append(code)

    effective: dict = {}
    chain = chain_k or (DEFAULT_CHAIN_K, "a typical chain; the Speed-up what-if picks K from a run")
    if settings.engine == "sglang":
        effective = _sglang_shape(settings, target, chain, add)
        _sglang_algorithm(settings, draft, add)
        runs_eagle3 = settings.algorithm == "EAGLE3" or (settings.algorithm == "EAGLE" and draft.is_eagle3)
        if settings.token_map and runs_eagle3:  # EAGLE with an EAGLE-3 draft: the fix makes it EAGLE3
            add(
                "warning",
                "token-map-ignored",
                f"--speculative-token-map {settings.token_map} is ignored for EAGLE3: SGLang maps draft ids "
                "with the checkpoint's own d2t tensor.",
                "Drop --speculative-token-map; make sure the checkpoint carries d2t/t2d.",
                {"--speculative-token-map": None},
            )
        if settings.max_running_requests and settings.max_running_requests > SGLANG_MAX_RUNNING_REQUESTS:
            add(
                "info",
                "max-running-requests-capped",
                f"--max-running-requests {settings.max_running_requests} is capped at "
                f"{SGLANG_MAX_RUNNING_REQUESTS} with speculative decoding.",
                f"Expect at most {SGLANG_MAX_RUNNING_REQUESTS} concurrent requests; size the deployment for that.",
            )
        if settings.mixed_chunk:
            add(
                "info",
                "mixed-chunk-off",
                "--enable-mixed-chunk is turned off with speculative decoding.",
                "Nothing to change; do not expect mixed chunked prefill in benchmarks.",
            )
    else:
        effective = {"num_speculative_tokens": settings.num_steps, "method": settings.algorithm}
        _vllm_method(settings, draft, chain, add)
    steps = effective.get("num_steps", settings.num_steps)
    if steps == 1:
        add(
            "warning",
            "single-draft-step",
            "Only 1 draft token per verify step: accept length can never exceed 2.0 (1 draft + the bonus), "
            "whatever the draft's accuracy.",
            f"Use {sglang_flags(chain[0], 1, chain[0] + 1)} ({chain[1]})."
            if settings.engine == "sglang"
            else f'Set "num_speculative_tokens": {chain[0]} in --speculative-config ({chain[1]}).',
            chain_edit(settings.engine, chain[0]),
        )
    _benchmark_knobs(settings, add)
    defaults = generation_defaults(settings.engine, settings.features, target.directory)
    if served_penalties(defaults, requests):
        effective["penalties"] = served_penalties(defaults, requests)
    feature_rules(settings.engine, settings.features, requests, defaults, target.hybrid, settings.spec, add)
    _vocab_mapping(config, draft.has_d2t, add)
    _context(settings, config, target, add)
    if trained_hf is None:
        aux_ids(settings.engine, config, target, add)
    else:
        aux_ids_against(
            settings.engine, config, target, [list(trained_hf), *map(list, trained_ties or [])], add
        )
    return LintReport(findings, settings, effective, edits, tuple(edited))


def chain_edit(engine: str, k: int) -> dict:
    """The command-line change to a chain of `k` drafts."""
    if engine == "sglang":
        return {
            "--speculative-num-steps": k,
            "--speculative-eagle-topk": 1,
            "--speculative-num-draft-tokens": k + 1,
        }
    return {"spec:num_speculative_tokens": k}


def _knob_edit(engine: str, names) -> dict:
    return {(name if engine == "sglang" else f"spec:{name}"): None for name in names}


def _benchmark_knobs(settings: ServingSettings, add) -> None:
    """Knobs after which the served acceptance is not the draft's (finding class synthetic-acceptance)."""
    knobs = dict(settings.knobs)
    by_load = knobs.pop(VLLM_K_BY_LOAD, None)
    if knobs:
        written = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in knobs.items())
        add(
            "error",
            "synthetic-acceptance",
            f"{written}: the engine accepts a simulated number of drafts instead of checking them, so the "
            "accept length it reports is the knob's, not the draft's (a benchmark of the serving path).",
            "Remove "
            + " and ".join(knobs)
            + " to measure the draft; keep it only for throughput benchmarks, never for accept length.",
            _knob_edit(settings.engine, knobs),
        )
    if by_load is not None:
        add(
            "warning",
            "k-varies-with-load",
            f"{VLLM_K_BY_LOAD} = {json.dumps(by_load)}: K changes with the batch size, so an accept length "
            "measured under load mixes several K (and a replay at one K does not match it).",
            f"Measure at a fixed num_speculative_tokens (drop {VLLM_K_BY_LOAD}), or compare per K.",
            _knob_edit(settings.engine, [VLLM_K_BY_LOAD]),
        )


def _sglang_shape(settings: ServingSettings, target: TargetFacts, chain: tuple[int, str], add) -> dict:
    """num_steps / topk / num_draft_tokens as SGLang will run them: backend/run/shapes.py's rules
    (`sglang_rewrites`, the replay's too), each rewrite or refusal a finding."""
    steps, topk, tokens = settings.num_steps, settings.topk, settings.num_draft_tokens
    recommended = f"{sglang_flags(chain[0], 1, chain[0] + 1)} ({chain[1]})"
    edit = chain_edit("sglang", chain[0])
    if steps is None and topk is None and tokens is None and target.architecture is None:
        add(
            "warning",
            "defaults-by-architecture",
            "--speculative-num-steps is not set, so SGLang chooses all three speculative settings from the "
            f"target's architecture (unknown here: pass --target DIR): {SGLANG_AUTO_DEFAULT} for Llama and most "
            f"models, {SGLANG_AUTO_CHAIN} for DeepSeek V2/V3, GptOss and Bailing MoE.",
            f"Set the three flags together, e.g. {recommended}.",
            edit,
        )
        return {"num_steps": None, "topk": None, "num_draft_tokens": None}
    try:
        shape, rewrites = sglang_rewrites(steps, topk, tokens, target.architecture)
    except ValueError as error:
        add(
            "error",
            "sglang-refuses",
            f"SGLang does not start with these flags: {error}.",
            f"Use {recommended}.",
            edit,
        )
        return {"num_steps": None, "topk": None, "num_draft_tokens": None}
    for rewrite in rewrites:
        if rewrite.code == "defaults-by-architecture":
            add(
                "warning",
                rewrite.code,
                f"--speculative-num-steps is not set: {rewrite.message}.",
                f"Set the three flags together, e.g. {recommended}.",
                edit,
            )
        else:  # topk1-draft-tokens-reset
            add(
                "error",
                rewrite.code,
                f"{rewrite.message[0].upper()}{rewrite.message[1:]}: you asked for {tokens} verified "
                f"tokens and get {shape.num_draft_tokens}.",
                f"For a chain: {recommended}; for a tree keep --speculative-num-draft-tokens {tokens} and raise "
                "--speculative-eagle-topk above 1.",
                edit,
            )
    return {"num_steps": shape.num_steps, "topk": shape.topk, "num_draft_tokens": shape.num_draft_tokens}


def _sglang_algorithm(settings: ServingSettings, draft: DraftFacts, add) -> None:
    config = draft.config
    if settings.algorithm == "EAGLE" and draft.is_eagle3:
        add(
            "error",
            "eagle-algorithm-eagle3-draft",
            f"--speculative-algorithm EAGLE with an EAGLE-3 draft ({config.architecture}, fc over 3 target "
            "layers): SGLang runs it as EAGLE-1 and skips the 3-layer fc, giving accept length exactly 1.0 "
            "with no error (held against SGLang main of 2026-07-19: it starts without a warning and accepts "
            "0 of 252 drafts; the automatic upgrade proposed in PR #21272 was closed without merging).",
            "--speculative-algorithm EAGLE3",
            {"--speculative-algorithm": "EAGLE3"},
        )
    elif settings.algorithm == "EAGLE3" and not config.use_aux_hidden_state:
        add(
            "error",
            "eagle3-algorithm-eagle1-draft",
            "--speculative-algorithm EAGLE3 but the draft says use_aux_hidden_state: false (EAGLE-1 style, "
            "no 3-layer fc).",
            "--speculative-algorithm EAGLE",
            {"--speculative-algorithm": "EAGLE"},
        )
    elif settings.algorithm not in ("EAGLE", "EAGLE3"):
        add(
            "warning",
            "not-eagle",
            f"--speculative-algorithm {settings.algorithm} does not run an EAGLE-3 draft.",
            "--speculative-algorithm EAGLE3",
            {"--speculative-algorithm": "EAGLE3"},
        )


def _vllm_method(settings: ServingSettings, draft: DraftFacts, chain: tuple[int, str], add) -> None:
    config = draft.config
    if settings.algorithm == "eagle" and draft.is_eagle3:
        add(
            "error",
            "eagle-algorithm-eagle3-draft",
            f'method "eagle" with an EAGLE-3 draft ({config.architecture}): the 3-layer fc input is not used.',
            '"method": "eagle3" in --speculative-config',
            {"spec:method": "eagle3"},
        )
    elif settings.algorithm != "eagle3":
        add(
            "warning",
            "not-eagle",
            f"method {settings.algorithm!r} does not run an EAGLE-3 draft.",
            '"method": "eagle3" in --speculative-config',
            {"spec:method": "eagle3"},
        )
    if settings.num_steps is None:
        add(
            "warning",
            "no-speculative-tokens",
            "num_speculative_tokens is not set in --speculative-config.",
            f'Add "num_speculative_tokens": {chain[0]} ({chain[1]}).',
            chain_edit("vllm", chain[0]),
        )


def _vocab_mapping(config: DraftConfig, has_d2t: bool, add) -> None:
    if config.draft_vocab_size < config.vocab_size and not has_d2t:
        add(
            "error",
            "missing-d2t",
            f"draft_vocab_size {config.draft_vocab_size} < vocab_size {config.vocab_size} but the checkpoint has "
            "no d2t: every engine then reads draft ids as target ids and proposes garbage, silently.",
            "Export d2t/t2d from the training run's vocab mapping (never regenerate it for a trained head).",
        )


def _context(settings: ServingSettings, config: DraftConfig, target: TargetFacts, add) -> None:
    served = settings.context_length or target.max_position_embeddings
    if served and served > config.max_position_embeddings:
        origin = (
            "--context-length/--max-model-len"
            if settings.context_length
            else "the target's max_position_embeddings"
        )
        add(
            "warning",
            "draft-context",
            f"Served context {served} ({origin}) exceeds the draft's max_position_embeddings "
            f"{config.max_position_embeddings}: the engine sets the draft's context to the target's, and a draft "
            "trained on shorter sequences degrades beyond them (sglang #6783).",
            f"Cap the context at {config.max_position_embeddings} for speculative requests, or train the draft "
            "on longer sequences.",
            {
                ("--context-length" if settings.engine == "sglang" else "--max-model-len"): (
                    config.max_position_embeddings
                )
            },
        )


# ----------------------------------------------------------------------------- entry point


def lint_command(
    draft_dir: str | Path | None,
    sglang: str | None = None,
    vllm: str | None = None,
    target_dir: str | Path | None = None,
    trained: list[list[int]] | None = None,
    request_file: str | Path | None = None,
    chain_k: tuple[int, str] | None = None,
    facts: DraftFacts | None = None,
) -> LintReport:
    """The lint of a command against a draft. `trained`: the wirings the probe found the draft trained
    on, best first (more than one when it could not tell them apart); `facts`: draft_facts of the draft
    when the caller read them already."""
    trained_hf, trained_ties = (trained[0], trained[1:]) if trained else (None, None)
    if (sglang is None) == (vllm is None):
        raise BadInput("give exactly one of an SGLang launch command or vLLM arguments")
    settings = parse_sglang(sglang) if sglang is not None else parse_vllm(vllm)
    draft_dir = draft_dir or settings.draft_path
    if not draft_dir:
        raise BadInput("no draft directory: pass --draft DIR (the command names none)")
    target = target_facts(target_dir, explicit=True) if target_dir else target_facts(settings.target_path)
    if is_dflash(draft_dir):
        config = dflash_config_of(draft_dir)
        drafts = (
            settings.num_steps
            if settings.engine == "vllm"
            else (settings.num_draft_tokens - 1 if settings.num_draft_tokens else None)
        )
        findings = dflash_findings(
            settings.engine, config, target.num_layers, drafts, settings.algorithm, draft_dir
        )
        return LintReport(
            findings, settings, {"num_speculative_tokens": drafts, "method": settings.algorithm}
        )
    requests = request_features(read_request_bodies(request_file)) if request_file else None
    report = lint(
        settings, facts or draft_facts(Path(draft_dir)), target, trained_hf, trained_ties, requests, chain_k
    )
    if report.edits:
        report.recommended = rewrite_command(
            sglang if sglang is not None else vllm, settings.engine, report.edits
        )
    if settings.draft_path and Path(settings.draft_path) != Path(draft_dir):
        report.findings.append(
            Finding(
                "draft-path",
                "info",
                f"The command serves {settings.draft_path}; linted against the local copy {draft_dir}.",
                fix="Make sure both are the same checkpoint.",
            )
        )
    return report


def draft_facts(draft_dir: Path) -> DraftFacts:
    """The config, and from the weights whether d2t is there and how wide fc's input is. Weights that
    cannot be read leave both unknown (preflight reports why). Safetensors weights are read from their
    headers (no torch); a pytorch_model.bin only torch can read (the dashboard reads it in its reader
    process: backend/service/serving_lint.py)."""
    config = read_draft_config(draft_dir)
    try:
        shapes = tensor_shapes(draft_dir)
        if shapes is None:
            if not any((draft_dir / name).is_file() for name in PICKLED_WEIGHTS):
                raise BadInput(f"{draft_dir}: no weights")  # preflight says which files it looked for
            from backend.engine.loading import read_draft

            shapes = {name: list(t.shape) for name, t in read_draft(draft_dir).tensors.items()}
        else:
            shapes = to_internal_names(shapes)[0]
    except BadInput:
        return DraftFacts(config, has_d2t=False, fc_input_width=None)
    fc = shapes.get("fc.weight")
    return DraftFacts(config, "d2t" in shapes, int(fc[1]) if fc is not None else None)
