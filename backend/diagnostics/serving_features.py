"""Serving features that cost acceptance without an error (threads in
shared/context/users-and-peers-2026.md): sampling penalties, structured output, LoRA adapters, prefix
caching on hybrid targets, prefill/decode disaggregation.

The evidence is what the server is started with (flags, read here from the same words the lint
splits) and what the requests ask for (request bodies as sent: OpenAI chat/completions or SGLang
/generate with its nested sampling_params). Each rule adds one lint finding whose code is its
diagnose class.
"""

from __future__ import annotations

import json
from pathlib import Path

from backend import BadInput

# Request fields (top level, or SGLang's sampling_params) and their neutral values.
PENALTIES = {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
MIN_TOKENS = ("min_tokens", "min_new_tokens")
GRAMMAR_FIELDS = (
    "response_format",
    "tools",
    "guided_json",
    "guided_regex",
    "guided_grammar",
    "guided_choice",
    "structured_outputs",
    "json_schema",
    "regex",
    "ebnf",
)
LORA_FIELDS = ("lora_path", "lora_request", "lora_name")
# vLLM's prefix caching is on unless turned off (vllm/config/cache.py CacheConfig.enable_prefix_caching)
# and its generation config "auto" applies the target's generation_config.json to every request
# (vllm/config/model.py ModelConfig.get_diff_sampling_param).


def read_request_bodies(path: str | Path) -> list[dict]:
    """Request bodies as sent: one JSON object, a JSON list of them, or JSONL."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such request file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{path}: cannot read the request file ({type(error).__name__})") from None
    try:
        parsed = json.loads(text)
        bodies = parsed if isinstance(parsed, list) else [parsed]
    except json.JSONDecodeError:
        bodies = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                bodies.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise BadInput(f"{path}: line {number} is not JSON ({error.msg})") from None
    if not bodies:
        raise BadInput(f"{path}: no request body in the file")
    for number, body in enumerate(bodies, 1):
        if not isinstance(body, dict):
            raise BadInput(f"{path}: request {number} is not a JSON object")
    return bodies


def _fields(body: dict) -> dict:
    nested = body.get("sampling_params")
    return {**body, **(nested if isinstance(nested, dict) else {})}


def penalties_of(fields: dict) -> dict:
    """The penalties a request or a generation config sets away from their neutral values."""
    out = {}
    for name, neutral in PENALTIES.items():
        value = fields.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) != neutral:
            out[name] = float(value)
    return out


def request_features(bodies: list[dict]) -> dict:
    """How many requests use each feature, and the penalties they set (the first one seen of each)."""
    counts = {"requests": len(bodies), "penalties": 0, "min_tokens": 0, "structured_output": 0, "lora": 0}
    values: dict = {}
    for body in bodies:
        fields = _fields(body)
        penalties = penalties_of(fields)
        if penalties:
            counts["penalties"] += 1
            for name, value in penalties.items():
                values.setdefault(name, value)
        counts["min_tokens"] += any(fields.get(name) for name in MIN_TOKENS)
        counts["structured_output"] += any(fields.get(name) for name in GRAMMAR_FIELDS)
        counts["lora"] += any(fields.get(name) for name in LORA_FIELDS)
    return {**counts, "penalty_values": values}


def generation_defaults(engine: str, flags: dict, target_dir: str | None) -> dict:
    """The penalties every request gets by default: vLLM's --override-generation-config, and under
    --generation-config auto (its default) the target's generation_config.json."""
    if engine != "vllm":
        return {}
    found: dict = {}
    source = flags.get("generation_config", "auto")
    path = (
        Path(target_dir or "") / "generation_config.json"
        if source == "auto"
        else Path(source) / "generation_config.json"
    )
    if source != "vllm" and (target_dir or source != "auto") and path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            config = {}
        if isinstance(config, dict):
            found.update(penalties_of(config))
    override = flags.get("override_generation_config")
    if override:
        try:
            parsed = json.loads(override)
        except json.JSONDecodeError as error:
            raise BadInput(f"--override-generation-config is not valid JSON ({error.msg})") from None
        if not isinstance(parsed, dict):
            raise BadInput("--override-generation-config must be a JSON object")
        found.update(penalties_of(parsed))
    return found


PENALTY_BEHAVIOUR = {
    "vllm": "vLLM applies the penalty to the target's logits when it verifies, while the EAGLE draft proposes "
    "from unpenalised logits (vllm#48932; its opt-in draft_apply_repetition_penalty, for "
    "draft_sample_method probabilistic, is not in 0.32's SpeculativeConfig), so every draft the penalty "
    "demotes is rejected",
    "sglang": "SGLang applies penalties once per verify step rather than per token (sglang#33643): a frequency "
    "penalty acts at about nominal / accept length and min_new_tokens counts steps, and the draft proposes "
    "without them",
}


def served_penalties(defaults: dict, requests: dict | None) -> dict:
    """The penalties served: the server's defaults, then what the requests set."""
    return {**defaults, **((requests or {}).get("penalty_values") or {})}


def feature_rules(
    engine: str, flags: dict, requests: dict | None, defaults: dict, hybrid: bool, spec: dict, add
) -> None:
    """Lint findings (severity, code = diagnose class, message, fix) for the features in use."""
    penalties = served_penalties(defaults, requests)
    if penalties:
        where = []
        if defaults:
            where.append("the server's default generation config")
        if requests and requests["penalties"]:
            where.append(f"{requests['penalties']} of {requests['requests']} requests")
        written = ", ".join(f"{k}={v:g}" for k, v in penalties.items())
        refused = [
            k
            for k, v in penalties.items()
            if (k == "repetition_penalty" and v <= 0) or (k != "repetition_penalty" and not -2 <= v <= 2)
        ]
        range_note = (
            f" {', '.join(refused)} outside the range the engines accept (repetition > 0, frequency and presence "
            "in [-2, 2], vLLM's SamplingParams): such requests are refused, not served."
            if refused
            else ""
        )
        add(
            "warning",
            "sampling-penalties",
            f"{written} ({' and '.join(where)}): {PENALTY_BEHAVIOUR.get(engine, PENALTY_BEHAVIOUR['vllm'])}."
            + range_note,
            "Measure the cost: diagnose --request FILE --samples ... replays with the penalty on the target only "
            "and on both; if it is large, serve speculative requests without the penalty or on a release that "
            "applies it to the draft.",
        )
    if requests and requests["structured_output"]:
        add(
            "warning",
            "structured-output",
            f"{requests['structured_output']} of {requests['requests']} requests are grammar-constrained: the grammar "
            "masks the target when it verifies but not the draft's proposals, so drafts outside the grammar are "
            "guaranteed rejections (vllm#47885; an acceptance cliff at position 1 under a JSON schema, vllm#42004).",
            "Report the constrained requests' accept length apart from the free ones; a draft trained on the "
            "schema's outputs, or an engine that masks drafts with the grammar, recovers it.",
        )
    lora_requests = (requests or {}).get("lora", 0)
    if flags.get("lora") or lora_requests:
        add(
            "warning",
            "lora",
            "LoRA adapters are served: they apply to the target only and the one draft runs unadapted "
            "(sglang#34337; vllm#52038 is the RFC for adapters on the draft), so adapter requests accept less"
            + (
                f" ({lora_requests} of {requests['requests']} requests name an adapter)"
                if lora_requests
                else ""
            )
            + ".",
            "Split accept length by adapter; train a draft on the adapted target's outputs, or serve adapter "
            "traffic without speculation.",
        )
    if (
        engine == "vllm"
        and hybrid
        and not flags.get("prefix_caching_off")
        and not spec.get("disable_eagle_block_drop")
    ):
        add(
            "warning",
            "prefix-cache",
            "the target is a hybrid model and prefix caching is on (vLLM's default): EAGLE's trailing-block drop "
            "gives a 0% prefix-cache hit rate on hybrid models with 3 or more attention groups (vllm#51771).",
            'Check the prefix-cache hit rate; "disable_eagle_block_drop": true in --speculative-config keeps the '
            "block (it cost 0.8-5.0% accept length there).",
        )
    mode = str(flags.get("disaggregation", "")).lower()
    kv_role = _kv_role(flags.get("kv_transfer"))
    if mode in ("decode", "prefill") or kv_role in ("kv_consumer", "kv_both"):
        add(
            "warning",
            "disaggregation",
            (
                f"--disaggregation-mode {mode}: the decode node drafts its first step from the hidden states the "
                "prefill node hands over; releases before sglang#10547 and sglang#10801 started from mock hidden "
                "states, and the first draft after prefill accepted nothing (sglang#7242, sglang#10616)."
                if mode
                else f"--kv-transfer-config kv_role {kv_role}: a disaggregated decode instance starts drafting from "
                "hidden states handed over by the prefill instance; a wrong hand-off shows as a first verify step "
                "that accepts nothing (the SGLang signature, sglang#7242)."
            ),
            "Compare the first verify step's acceptance with the later ones (observe --requests on per-step "
            "counts flags the signature); upgrade past sglang#10801.",
        )


def _kv_role(config: str | None) -> str | None:
    if not config:
        return None
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as error:
        raise BadInput(f"--kv-transfer-config is not valid JSON ({error.msg})") from None
    return parsed.get("kv_role") if isinstance(parsed, dict) else None


def request_lint(request_file: str | Path, engine: str) -> tuple[list[dict], dict]:
    """The request-side rules alone (no serving command): lint findings as dicts, and the penalties
    the requests set."""
    found: list[dict] = []
    requests = request_features(read_request_bodies(request_file))

    def add(severity, code, message, fix):
        found.append({"severity": severity, "code": code, "message": message, "fix": fix})

    feature_rules(engine, {}, requests, {}, False, {}, add)
    return found, served_penalties({}, requests)
