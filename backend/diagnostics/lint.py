"""Serving-flag lint: what an SGLang launch command or vLLM arguments will really run with this draft.

Rules follow docs/reference.md §9 (SGLang flags that silently change what runs) and
§2 (which config field, in which convention, each engine reads the aux layer ids from).
Each finding has a severity (error: acceptance is lost or the draft is misused; warning: likely
loss; info: worth knowing), a stable code, an explanation and the fix.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from backend import BadInput
from backend.diagnostics.serving_features import (
    feature_flags,
    feature_rules,
    generation_defaults,
    is_hybrid,
    read_request_bodies,
    request_features,
    served_penalties,
)
from backend.engine.draft_config import DraftConfig, read_draft_config, read_json_object
from backend.engine.loading import config_sizes
from backend.engine.shapes import SGLANG_AUTO_CHAIN, SGLANG_AUTO_DEFAULT, sglang_flags, sglang_rewrites
from backend.engine.wiring import default_hf_indices

SGLANG_MAX_RUNNING_REQUESTS = 48
DEFAULT_CHAIN_K = 3  # the chain every fix recommends when no run of the draft says better
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3Speculator")


@dataclass(frozen=True)
class Finding:
    severity: str  # error | warning | info
    code: str
    message: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ServingSettings:
    """What the command line asks for (None = not given) and, after `effective_*`, what runs."""

    engine: str  # sglang | vllm
    algorithm: str | None = None
    draft_path: str | None = None
    target_path: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    token_map: str | None = None
    context_length: int | None = None
    max_running_requests: int | None = None
    mixed_chunk: bool = False
    # Benchmark knobs that replace the draft's acceptance with a made-up one, or vary K with load
    # (name -> value as written): the served numbers are then not the draft's.
    knobs: dict = field(default_factory=dict)
    # Features that cost acceptance (serving_features.feature_flags) and vLLM's speculative config.
    features: dict = field(default_factory=dict)
    spec: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TargetFacts:
    architecture: str | None
    num_layers: int | None
    max_position_embeddings: int | None
    hybrid: bool = False  # attention mixed with linear-attention / state-space layers
    directory: str | None = None  # a local model directory (its generation_config.json is read)


@dataclass
class LintReport:
    findings: list[Finding]
    requested: ServingSettings
    effective: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        order = {"error": 0, "warning": 1, "info": 2}
        findings = sorted(self.findings, key=lambda f: order[f.severity])
        return {
            "findings": [f.to_dict() for f in findings],
            "engine": self.requested.engine,
            "requested": asdict(self.requested),
            "effective": self.effective,
            "effective_flags": effective_flags(self.requested.engine, self.effective),
            "errors": sum(f.severity == "error" for f in findings),
        }


def effective_flags(engine: str, effective: dict) -> str | None:
    """What will run, written as the engine's command line writes it."""
    if engine == "sglang":
        shape = [effective.get(k) for k in ("num_steps", "topk", "num_draft_tokens")]
        return None if None in shape else sglang_flags(*shape)
    k = effective.get("num_speculative_tokens")
    return None if k is None else f"--speculative-config '{{\"num_speculative_tokens\": {k}, ...}}'"


# ----------------------------------------------------------------------------- parsing

SGLANG_FLAGS = {
    "--speculative-algorithm": ("algorithm", str),
    "--speculative-draft-model-path": ("draft_path", str),
    "--speculative-draft-model": ("draft_path", str),
    "--speculative-num-steps": ("num_steps", int),
    "--speculative-eagle-topk": ("topk", int),
    "--speculative-num-draft-tokens": ("num_draft_tokens", int),
    "--speculative-token-map": ("token_map", str),
    "--model-path": ("target_path", str),
    "--model": ("target_path", str),
    "--context-length": ("context_length", int),
    "--max-running-requests": ("max_running_requests", int),
}


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command.replace("\\\n", " "))
    except ValueError as error:
        raise BadInput(f"cannot split the command line: {error}") from error


MAX_FLAG_INT = 2**31 - 1  # the engines parse these into 32-bit fields (and no draft runs more)


def _convert(flag: str, kind, value: str):
    """A flag's value as the engine's argument parser types it; every integer these flags take
    (steps, topk, draft tokens, context, running requests) is positive."""
    try:
        converted = kind(value)
    except ValueError as error:
        raise BadInput(f"{flag} expects an integer, got {value!r}") from error
    if kind is int and not 1 <= converted <= MAX_FLAG_INT:
        raise BadInput(f"{flag} must be a positive integer (1..{MAX_FLAG_INT}), got {value}")
    return converted


# SGLang environment/envs.py: SGLANG_SIMULATE_ACC_LEN > 0 makes the verify step accept a simulated
# number of drafts (a benchmark of the serving path, not of the draft); given as VAR=value words.
SGLANG_SIMULATED = ("SGLANG_SIMULATE_ACC_LEN",)
# vllm/config/speculative.py SpeculativeConfig: rejection_sample_method "synthetic" accepts drafts at
# synthetic_acceptance_rates / _length instead of checking them; num_speculative_tokens_per_batch_size
# changes K with the batch size (vllm/v1/spec_decode/dynamic/utils.py).
VLLM_SYNTHETIC_KEYS = ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")
VLLM_K_BY_LOAD = "num_speculative_tokens_per_batch_size"


def parse_sglang(command: str) -> ServingSettings:
    settings = ServingSettings("sglang")
    words = _split(command)
    index = 0
    while index < len(words):
        word = words[index]
        flag, _, inline = word.partition("=")
        if flag in SGLANG_SIMULATED and inline.strip() not in ("", "0", "0.0"):
            settings.knobs[flag] = inline
        if flag == "--enable-mixed-chunk":
            settings.mixed_chunk = True
        elif flag in SGLANG_FLAGS:
            name, kind = SGLANG_FLAGS[flag]
            if not inline:
                index += 1
                if index >= len(words) or words[index].startswith("--"):
                    raise BadInput(f"{flag} needs a value")
                inline = words[index]
            setattr(settings, name, _convert(flag, kind, inline))
        index += 1
    if settings.algorithm is None:
        raise BadInput("no --speculative-algorithm in the command: speculative decoding is off")
    settings.algorithm = settings.algorithm.upper()
    settings.features = feature_flags(words, "sglang")
    return settings


def parse_vllm(arguments: str) -> ServingSettings:
    settings = ServingSettings("vllm")
    words = _split(arguments)
    spec_config = None
    for index, word in enumerate(words):
        flag, _, inline = word.partition("=")
        value = inline or (words[index + 1] if index + 1 < len(words) else None)
        if flag in ("--speculative-config", "--speculative_config"):
            spec_config = value
        elif flag in ("--max-model-len", "--max_model_len") and value is not None:
            settings.context_length = _convert(flag, int, value)
        elif flag == "--model" and value is not None:
            settings.target_path = value
        elif flag == "serve" and index + 1 < len(words) and not words[index + 1].startswith("-"):
            settings.target_path = words[index + 1]
    if spec_config is None:
        raise BadInput("no --speculative-config in the arguments: speculative decoding is off")
    try:
        spec = json.loads(spec_config)
    except json.JSONDecodeError as error:
        raise BadInput(f"--speculative-config is not valid JSON ({error})") from error
    if not isinstance(spec, dict):
        raise BadInput("--speculative-config must be a JSON object")
    settings.algorithm = str(spec.get("method", "")).lower() or None
    settings.draft_path = spec.get("model")
    if settings.draft_path is not None and not isinstance(settings.draft_path, str):
        raise BadInput(
            f"--speculative-config: model must be the draft's path, got {settings.draft_path!r:.60}"
        )
    if spec.get("num_speculative_tokens") is not None:
        settings.num_steps = _convert("num_speculative_tokens", int, str(spec["num_speculative_tokens"]))
    settings.knobs = _vllm_knobs(spec)
    settings.features = feature_flags(words, "vllm")
    settings.spec = spec
    return settings


def _vllm_knobs(spec: dict) -> dict:
    """The benchmark knobs a --speculative-config sets (VLLM_SYNTHETIC_KEYS, VLLM_K_BY_LOAD)."""
    knobs = {}
    if str(spec.get("rejection_sample_method", "standard")).lower() == "synthetic" or any(
        spec.get(key) is not None for key in VLLM_SYNTHETIC_KEYS[1:]
    ):
        knobs.update({k: spec[k] for k in VLLM_SYNTHETIC_KEYS if spec.get(k) is not None})
    if spec.get(VLLM_K_BY_LOAD) is not None:
        knobs[VLLM_K_BY_LOAD] = spec[VLLM_K_BY_LOAD]
    return knobs


def target_facts(target_dir: str | Path | None, explicit: bool = False) -> TargetFacts:
    """The target's architecture, depth and context from its config.json. A target the user named
    (--target) must be a readable model directory; one the serving command names may be a hub id
    (then nothing is known), but a local directory it names must be readable too."""
    if not target_dir:
        return TargetFacts(None, None, None)
    path = Path(target_dir) / "config.json"
    if not path.is_file():
        if explicit:
            raise BadInput(f"--target {target_dir}: not a local model directory (no config.json)")
        return TargetFacts(None, None, None)
    raw = read_json_object(path)
    sizes = config_sizes(raw, path, ("num_hidden_layers", "max_position_embeddings"))
    architectures = raw.get("architectures")
    if isinstance(architectures, list):
        architectures = architectures[0] if architectures else None
    return TargetFacts(
        architectures if isinstance(architectures, str) else None,
        sizes["num_hidden_layers"],
        sizes["max_position_embeddings"],
        is_hybrid(raw),
        str(target_dir),
    )


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
    add = lambda *args: findings.append(Finding(*args))  # noqa: E731
    effective: dict = {}
    chain = chain_k or (DEFAULT_CHAIN_K, "a typical chain; the Speed-up what-if picks K from a run")
    if settings.engine == "sglang":
        effective = _sglang_shape(settings, target, chain, add)
        _sglang_algorithm(settings, draft, add)
        if settings.token_map and settings.algorithm == "EAGLE3":
            add(
                "warning",
                "token-map-ignored",
                f"--speculative-token-map {settings.token_map} is ignored for EAGLE3: SGLang maps draft ids "
                "with the checkpoint's own d2t tensor.",
                "Drop --speculative-token-map; make sure the checkpoint carries d2t/t2d.",
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
        _vllm_method(settings, draft, add)
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
        )
    _benchmark_knobs(settings, add)
    defaults = generation_defaults(settings.engine, settings.features, target.directory)
    if served_penalties(defaults, requests):
        effective["penalties"] = served_penalties(defaults, requests)
    feature_rules(settings.engine, settings.features, requests, defaults, target.hybrid, settings.spec, add)
    _vocab_mapping(config, draft.has_d2t, add)
    _context(settings, config, target, add)
    if trained_hf is None:
        _aux_ids(settings.engine, config, target, add)
    else:
        _aux_ids_against(
            settings.engine, config, target, [list(trained_hf), *map(list, trained_ties or [])], add
        )
    return LintReport(findings, settings, effective)


def _benchmark_knobs(settings: ServingSettings, add) -> None:
    """Knobs after which the served acceptance is not the draft's (issue 42, synthetic-acceptance)."""
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
        )
    if by_load is not None:
        add(
            "warning",
            "k-varies-with-load",
            f"{VLLM_K_BY_LOAD} = {json.dumps(by_load)}: K changes with the batch size, so an accept length "
            "measured under load mixes several K (and a replay at one K does not match it).",
            f"Measure at a fixed num_speculative_tokens (drop {VLLM_K_BY_LOAD}), or compare per K.",
        )


def _sglang_shape(settings: ServingSettings, target: TargetFacts, chain: tuple[int, str], add) -> dict:
    """num_steps / topk / num_draft_tokens as SGLang will run them: backend/engine/shapes.py's rules
    (`sglang_rewrites`, the replay's too), each rewrite or refusal a finding."""
    steps, topk, tokens = settings.num_steps, settings.topk, settings.num_draft_tokens
    recommended = f"{sglang_flags(chain[0], 1, chain[0] + 1)} ({chain[1]})"
    if steps is None and topk is None and tokens is None and target.architecture is None:
        add(
            "warning",
            "defaults-by-architecture",
            "--speculative-num-steps is not set, so SGLang chooses all three speculative settings from the "
            f"target's architecture (unknown here: pass --target DIR): {SGLANG_AUTO_DEFAULT} for Llama and most "
            f"models, {SGLANG_AUTO_CHAIN} for DeepSeek V2/V3, GptOss and Bailing MoE.",
            f"Set the three flags together, e.g. {recommended}.",
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
        )
        return {"num_steps": None, "topk": None, "num_draft_tokens": None}
    for rewrite in rewrites:
        if rewrite.code == "defaults-by-architecture":
            add(
                "warning",
                rewrite.code,
                f"--speculative-num-steps is not set: {rewrite.message}.",
                f"Set the three flags together, e.g. {recommended}.",
            )
        else:  # topk1-draft-tokens-reset
            add(
                "error",
                rewrite.code,
                f"{rewrite.message[0].upper()}{rewrite.message[1:]}: you asked for {tokens} verified "
                f"tokens and get {shape.num_draft_tokens}.",
                f"For a chain: {recommended}; for a tree keep --speculative-num-draft-tokens {tokens} and raise "
                "--speculative-eagle-topk above 1.",
            )
    return {"num_steps": shape.num_steps, "topk": shape.topk, "num_draft_tokens": shape.num_draft_tokens}


def _sglang_algorithm(settings: ServingSettings, draft: DraftFacts, add) -> None:
    config = draft.config
    if settings.algorithm == "EAGLE" and draft.is_eagle3:
        add(
            "error",
            "eagle-algorithm-eagle3-draft",
            f"--speculative-algorithm EAGLE with an EAGLE-3 draft ({config.architecture}, fc over 3 target "
            "layers): older SGLang runs it as EAGLE-1 and skips the 3-layer fc, giving accept length exactly "
            "1.0 with no error (newer SGLang upgrades it, PR #21272).",
            "--speculative-algorithm EAGLE3",
        )
    elif settings.algorithm == "EAGLE3" and not config.use_aux_hidden_state:
        add(
            "error",
            "eagle3-algorithm-eagle1-draft",
            "--speculative-algorithm EAGLE3 but the draft says use_aux_hidden_state: false (EAGLE-1 style, "
            "no 3-layer fc).",
            "--speculative-algorithm EAGLE",
        )
    elif settings.algorithm not in ("EAGLE", "EAGLE3"):
        add(
            "warning",
            "not-eagle",
            f"--speculative-algorithm {settings.algorithm} does not run an EAGLE-3 draft.",
            "--speculative-algorithm EAGLE3",
        )


def _vllm_method(settings: ServingSettings, draft: DraftFacts, add) -> None:
    config = draft.config
    if settings.algorithm == "eagle" and draft.is_eagle3:
        add(
            "error",
            "eagle-algorithm-eagle3-draft",
            f'method "eagle" with an EAGLE-3 draft ({config.architecture}): the 3-layer fc input is not used.',
            '"method": "eagle3" in --speculative-config',
        )
    elif settings.algorithm != "eagle3":
        add(
            "warning",
            "not-eagle",
            f"method {settings.algorithm!r} does not run an EAGLE-3 draft.",
            '"method": "eagle3" in --speculative-config',
        )
    if settings.num_steps is None:
        add(
            "warning",
            "no-speculative-tokens",
            "num_speculative_tokens is not set in --speculative-config.",
            'Add "num_speculative_tokens": 3 (or what the probe\'s what-if recommends).',
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
        )


def _aux_ids(engine: str, config: DraftConfig, target: TargetFacts, add) -> None:
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    layers = target.num_layers
    defaults = default_hf_indices(layers) if layers else None
    nested_hf = [i + 1 for i in nested] if nested is not None else None
    if nested is not None and top is not None and list(top) != nested_hf:
        same = list(top) == list(nested)
        add(
            "error",
            "aux-ids-disagree",
            f"The draft declares aux ids twice: nested {nested} (output-of-layer: HF {nested_hf}) and top-level "
            f"{top} (HF indices). SGLang uses HF {nested_hf}, vLLM uses HF {top}"
            + (": the same list in both fields selects layers one apart (vLLM PR #43671)." if same else "."),
            "Keep the wiring the draft was trained on (python -m backend probe tells which) and write it as "
            "nested ids = HF - 1 and top-level ids = HF.",
        )
    if engine == "sglang":
        if nested is None and top is not None:
            fallback = f"HF {defaults}" if defaults else "the defaults HF [2, L//2, L-3]"
            severity = "info" if defaults == list(top) else "warning"
            add(
                severity,
                "aux-ids-field",
                f"SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids; this draft only has the top-level "
                f"field {top} (vLLM's), so SGLang falls back to {fallback}.",
                f'Add "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {[i - 1 for i in top]}}} '
                "(output-of-layer ids = HF - 1).",
            )
        if nested is not None and defaults and list(nested) == defaults and nested_hf != defaults:
            add(
                "warning",
                "aux-ids-convention",
                f"Nested ids {nested} equal the default HF indices for L={layers}, but the nested field is read "
                f"as output-of-layer ids: SGLang selects HF {nested_hf}, one layer above each default.",
                f"If the draft was trained on the defaults write {[i - 1 for i in defaults]} in eagle_config.",
            )
    else:
        if top is None and nested is not None:
            # readings.py vllm_v1_wiring / vllm_v2_wiring: vLLM 0.32's V1 runner (its CPU build) reads the
            # nested ids as HF indices, its V2 runner (the GPU default) ignores them for the defaults.
            fallback = f"HF {defaults}" if defaults else "the defaults HF [2, L//2, L-3]"
            v1_right, v2_right = list(nested) == nested_hf, defaults == nested_hf
            severity = "info" if v1_right and v2_right else "error"
            add(
                severity,
                "aux-ids-field",
                f"This draft has only the nested eagle_config ids {nested} (trained, as SGLang and SpecForge read "
                f"them, on HF {nested_hf}). vLLM 0.32's V1 runner (the CPU build, VLLM_USE_V2_MODEL_RUNNER=0) "
                f"reads them as HF indices: HF {list(nested)}"
                + ("" if v1_right else ", every state one layer low")
                + f"; its V2 runner (the GPU default) ignores them and uses {fallback}"
                + (
                    " — the same layers, by luck."
                    if v2_right
                    else " (vLLM PR #50170: acceptance 1.2%, accept length 1.04)."
                ),
                f'Add top-level "eagle_aux_hidden_state_layer_ids": {nested_hf} (HF indices): both runners read it '
                "first.",
            )
        if top is not None and defaults and [i + 1 for i in top] == defaults and list(top) != defaults:
            add(
                "warning",
                "aux-ids-convention",
                f"Top-level ids {top} equal the defaults written as output-of-layer ids for L={layers}, but vLLM "
                f"reads them as HF indices: it selects HF {top}, one layer below each default.",
                f"If the draft was trained on the defaults write {defaults} at the top level.",
            )


def served_hf(engine: str, config: DraftConfig, num_layers: int | None) -> list[int] | None:
    """The HF indices an engine feeds this draft (docs/reference.md §2): SGLang reads the nested
    output-of-layer ids (+1), vLLM the top-level HF ids; either falls back to the defaults."""
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    if engine == "sglang" and nested is not None:
        return [i + 1 for i in nested]
    if engine != "sglang" and top is not None:
        return list(top)
    return default_hf_indices(num_layers) if num_layers else None


def _aux_ids_against(
    engine: str, config: DraftConfig, target: TargetFacts, trained: list[list[int]], add
) -> None:
    """The wiring findings once the trained layers are known (`trained`: the probe's best, then the
    wirings it could not tell from the best): never suggest the declared wiring when the probe rejected
    it; say what to write so that this engine feeds the trained layers, and when several wirings are
    within the probe's noise, name them all and say which check settles it."""
    served = served_hf(engine, config, target.num_layers)
    name = "SGLang" if engine == "sglang" else "vLLM"
    best = trained[0]
    found = " or ".join(f"HF {w}" for w in trained)
    if served in trained:
        add(
            "info",
            "aux-ids-trained",
            f"{name} feeds HF {served}, "
            + (
                "the layers the wiring probe found this draft trained on."
                if len(trained) == 1
                else f"one of the wirings the probe found this draft trained on ({found}: it cannot tell them apart)."
            ),
            "Nothing to change for the wiring.",
        )
        return
    ties = (
        ""
        if len(trained) == 1
        else f" The probe cannot tell {found} apart on its samples, so this lint writes none of them yet."
    )
    add(
        "error",
        "aux-ids-not-trained",
        f"The wiring probe found this draft trained on {found}, but {name} will feed HF {served} "
        f"(from the draft's config): the draft sees layers it was never trained on.{ties}",
        f'Write the trained wiring in both fields: "eagle_config": {{"eagle_aux_hidden_state_layer_ids": '
        f"{[i - 1 for i in best]}}} (SGLang, output-of-layer ids = HF - 1) and top-level "
        f'"eagle_aux_hidden_state_layer_ids": {best} (vLLM, HF indices).'
        if len(trained) == 1
        else f"Separate {found} first: run the wiring probe on more samples (python -m backend probe --samples "
        "FILE --limit 32) or hold the served features against the draft's training features (Train vs serve); "
        "then write the one it separates in both fields (nested SGLang ids = HF - 1, top-level vLLM ids = HF).",
    )


# ----------------------------------------------------------------------------- entry point


def lint_command(
    draft_dir: str | Path | None,
    sglang: str | None = None,
    vllm: str | None = None,
    target_dir: str | Path | None = None,
    trained_hf: list[int] | None = None,
    trained_ties: list[list[int]] | None = None,
    request_file: str | Path | None = None,
    chain_k: tuple[int, str] | None = None,
) -> LintReport:
    if (sglang is None) == (vllm is None):
        raise BadInput("give exactly one of an SGLang launch command or vLLM arguments")
    settings = parse_sglang(sglang) if sglang is not None else parse_vllm(vllm)
    draft_dir = draft_dir or settings.draft_path
    if not draft_dir:
        raise BadInput("no draft directory: pass --draft DIR (the command names none)")
    target = target_facts(target_dir, explicit=True) if target_dir else target_facts(settings.target_path)
    requests = request_features(read_request_bodies(request_file)) if request_file else None
    report = lint(settings, draft_facts(Path(draft_dir)), target, trained_hf, trained_ties, requests, chain_k)
    if settings.draft_path and Path(settings.draft_path) != Path(draft_dir):
        report.findings.append(
            Finding(
                "info",
                "draft-path",
                f"The command serves {settings.draft_path}; linted against the local copy {draft_dir}.",
                "Make sure both are the same checkpoint.",
            )
        )
    return report


def draft_facts(draft_dir: Path) -> DraftFacts:
    """The config, and from the weights whether d2t is there and how wide fc's input is. Weights that
    cannot be read leave both unknown (preflight reports why)."""
    from backend.engine.loading import read_draft

    config = read_draft_config(draft_dir)
    try:
        tensors = read_draft(draft_dir).tensors
    except BadInput:
        return DraftFacts(config, has_d2t=False, fc_input_width=None)
    fc = tensors.get("fc.weight")
    return DraftFacts(config, "d2t" in tensors, int(fc.shape[1]) if fc is not None else None)
