"""What a user asks for: one frozen `ReplayRequest`, built by the CLI's flags or the Decode form, run
by the service, stored with the run and read back from it.

Each field says what it is (`Setting`): its role (the pair, the prompt, a setting that decides what a
replay computes, or where it runs), its check (one rule, run when a request is made and when a CLI
flag is parsed), its CLI flag and its Decode widget. The CLI's flags (backend/cli/flags.py
`setting_flags`) and the Decode form (ui/decode/form.py) are built from these fields, so a new
setting is declared here once, used where it acts, and tested.

A request is validated when it is made: a bad value is a BadInput before any model loads. Against the
loaded pair it is resolved once (backend/service/plan.py `resolve`, which also tokenizes a text prompt: `prompt_ids`); a stored run answers a request
when their `decides` values are equal (service/runs.py `find_finished_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from backend import BadInput
from backend.run.engine_names import ENGINES
from backend.run.settings import (
    Setting,
    Widget,
    _between,
    _integer,
    _number,
    _one_of,
    _temperature,
    _top_k,
    _top_p,
    setting,
)
from backend.run.shapes import DRAFT_ATTENTION, TreeShape, sglang_shape
from backend.run.wiring import parse_aux_indices

MAX_STEPS = 64
MAX_TOPK = 16
MAX_DRAFT_TOKENS = 256
MAX_NEW_TOKENS = (
    32768  # a replay records every step: past this it runs for hours (the target's context binds first)
)
ENGINE_CHOICES = ("auto", *ENGINES)  # whose reading of the draft a replay runs
VIA_CHOICES = ("step", "trace")  # the target's side: a forward per verify step, or a trace per sample
TRACE_SOURCES = ("local", "vllm")


def settings_of(role: str | None = None) -> list[tuple[str, Setting, object]]:
    """(name, Setting, default) of every ReplayRequest field with `role` (None: every setting field)."""
    out = []
    for f in fields(ReplayRequest):
        meta = f.metadata.get("setting")
        if meta is not None and (role is None or meta.role == role) and meta.role in ("decides", "placement"):
            out.append((f.name, meta, f.default))
    return out


@dataclass(frozen=True)
class Decoding:
    """A request's effective drafting and acceptance (see ReplayRequest.decoding)."""

    shape: TreeShape
    rule: str  # whose sampling acceptance rule: sglang | vllm
    greedy: bool
    notes: list[str] = field(default_factory=list)  # every rewrite and every engine disagreement


@dataclass(frozen=True)
class ReplayRequest:
    target: str = setting("", role="pair")  # target model directory
    draft: str = setting("", role="pair")  # draft directory
    prompt_ids: tuple[int, ...] | None = setting(None, role="prompt")  # ids as they are (no template, no BOS)
    prompt_text: str | None = setting(None, role="prompt")  # or text, tokenized with the target's tokenizer
    chat_template: bool = setting(False, role="prompt")  # prompt_text as one user message, templated
    sample_ref: str | None = setting(None, role="prompt")  # "file#index", "dataset 1 #3" or "prompt"
    sample_id: int | None = setting(None, role="prompt")
    num_steps: int = setting(
        4,
        check=_between("K (draft steps)", 1, MAX_STEPS),
        flag="--steps",
        group="decoding",
        parse=_integer,
        help="K: draft tokens per verify step",
        widget=Widget("number", "K (draft steps)", low=1, high=MAX_STEPS),
    )
    max_new_tokens: int = setting(
        128,
        check=_between("max new tokens", 1, MAX_NEW_TOKENS),
        flag="--max-new-tokens",
        group="decoding",
        parse=_integer,
        help="tokens to generate at most (the budget)",
        widget=Widget("number", "Max new tokens", low=1, high=MAX_NEW_TOKENS, widget_value=96),
    )
    aux_hf_indices: tuple[int, ...] | None = setting(
        None,  # checked once, against the target's depth (wiring.override_wiring)
        flag="--aux-hf-indices",
        group="common",
        parse=parse_aux_indices,
        help="override wiring: three HF hidden_states indices (0 = embedding output); "
        "empty: the draft's declared wiring",
        widget=Widget("text", "Wiring override (HF)"),
    )
    via: str = setting(
        "step",
        check=_one_of("via", VIA_CHOICES),
        flag="--via",
        group="source",
        parse=str,
        choices=VIA_CHOICES,
        help="how the target's side is computed: step = a target forward per verify step (the target "
        "loaded here); trace = the target once per sample (a trace: its greedy continuation, states and "
        "top log-probs), then only the draft runs (greedy chains and trees)",
        widget=Widget("select", "Target's side", row="tree"),
    )
    trace_from: str = setting(
        "local",
        check=_one_of("trace source", TRACE_SOURCES),
        flag="--trace-from",
        group="source",
        parse=str,
        choices=TRACE_SOURCES,
        help="with --via trace: who computes the trace (local = the target loaded here, once per sample; "
        "vllm = a vLLM serving the target with the hidden-states method: --url, or --launch here)",
    )
    trace_url: str | None = setting(
        None,
        role="placement",
        flag="--url",
        group="source",
        parse=str,
        help="with --trace-from vllm: the vLLM serving the target with the extract_hidden_states method "
        "(eagle_aux_hidden_state_layer_ids = the wiring's HF indices, sorted; docs/traces.md)",
    )
    trace_launch: bool = setting(
        False,
        role="placement",
        flag="--launch",
        group="source",
        help="with --trace-from vllm: launch vLLM's CPU build here on the target (with SpecLens's CPU connector)",
    )
    engine: str = setting(
        "auto",
        check=_one_of("engine", ENGINE_CHOICES),
        flag="--engine",
        group="common",
        parse=str,
        choices=ENGINE_CHOICES,
        help="read and run the draft as this engine does (wiring, variant flags, embedding); "
        "auto = the reading of the tool that trained it (docs/reference.md §10)",
        widget=Widget("select", "Run it as"),
    )
    topk: int = setting(
        1,
        check=_between("topk", 1, MAX_TOPK),
        flag="--topk",
        group="tree",
        parse=_integer,
        help="children per frontier node (SGLang --speculative-eagle-topk; default 1: a chain)",
        widget=Widget("number", "topk", row="tree", low=1, high=MAX_TOPK),
    )
    num_draft_tokens: int | None = setting(
        None,
        check=_between("num draft tokens", 2, MAX_DRAFT_TOKENS, optional=True),
        flag="--num-draft-tokens",
        group="tree",
        parse=_integer,
        help="tokens verified per step, the root included (SGLang --speculative-num-draft-tokens; "
        "topk 1 forces steps + 1)",
        widget=Widget(
            "number",
            "Draft tokens N",
            row="tree",
            low=0,
            high=MAX_DRAFT_TOKENS,
            none_at=0,
            range=f"0 (none) or 2 to {MAX_DRAFT_TOKENS}",
        ),  # fmt: skip
    )
    temperature: float = setting(
        0.0,
        check=_temperature,
        flag="--temperature",
        group="tree",
        parse=_number,
        help="0 (default): greedy",
        widget=Widget("number", "Temperature", row="sampling", low=0.0, step=0.1, range="0 or more"),
    )
    top_p: float = setting(
        1.0,
        check=_top_p,
        flag="--top-p",
        group="tree",
        parse=_number,
        widget=Widget("number", "top_p", row="sampling", step=0.05, range="above 0, at most 1"),
    )
    top_k: int = setting(
        0,
        check=_top_k,
        flag="--top-k",
        group="tree",
        parse=_integer,
        help="0 or -1: every token; 1 is greedy",
        widget=Widget("number", "top_k (0 = all)", row="sampling", range="-1 or more"),
    )
    seed: int = setting(
        0,
        check=_between("seed", 0, 2**63 - 1),
        flag="--seed",
        group="tree",
        parse=_integer,
        help="seeds every random draw: a run replays bit for bit",
        widget=Widget("number", "Seed", row="sampling", low=0, high=2**63 - 1),
    )
    draft_attention: str = setting(
        "ancestors",
        check=_one_of("draft attention", DRAFT_ATTENTION),
        flag="--draft-attention",
        group="tree",
        parse=str,
        choices=DRAFT_ATTENTION,
        help="trees: draft nodes attend to their true ancestors, or to SGLang's per-rank KV slots",
        widget=Widget("select", "Draft attention", row="tree"),
    )
    ignore_eos: bool = setting(
        False,
        flag="--ignore-eos",
        group="tree",
        help="run to max new tokens past end-of-sequence, as a benchmark client asks (ignore_eos: vLLM "
        "sampling_params.py update_from_generation_config and SGLang schedule_batch.py "
        "Req.check_finished then never stop on EOS)",
        widget=Widget("checkbox", "Ignore EOS", row="sampling"),
    )
    # probabilities, top-k and hidden states (replay --no-record)
    record: bool = setting(True, role="placement")
    device: str | None = setting(
        None,
        role="placement",
        flag="--device",
        group="common",
        parse=str,
        help="cuda, cpu, ... (default: cuda when available)",
    )
    dtype: str | None = setting(
        None,
        role="placement",
        flag="--dtype",
        group="common",
        parse=str,
        help="fp32, bf16 or fp16 (default: bf16 on GPU, fp32 on CPU)",
    )
    device_map: str | None = setting(
        None,
        role="placement",
        flag="--device-map",
        group="dispatch",
        parse=str,
        help="auto, balanced, sequential, or a JSON object / file of module -> device (0, cuda:1, cpu, "
        "disk): load the target split across devices with accelerate (backend/target/dispatch.py)",
    )
    max_memory: str | None = setting(
        None,
        role="placement",
        flag="--max-memory",
        group="dispatch",
        parse=str,
        help="per-device limits for --device-map, e.g. 0=20GiB,1=20GiB,cpu=64GiB",
    )

    def __post_init__(self):
        """Every value the user gave, checked here once: a bad one is a BadInput before any model
        loads. Each setting's own check (its `Setting`), the prompt's, then SGLang's flag rules
        (`decoding`)."""
        if self.prompt_ids is not None:
            object.__setattr__(self, "prompt_ids", tuple(self.prompt_ids))
        if self.aux_hf_indices is not None:
            object.__setattr__(self, "aux_hf_indices", tuple(self.aux_hf_indices))
        # what asks the same decode is one value, so that equal requests compare equal: topk None is a
        # chain (1), and a chain's N = K + 1 is what SGLang runs when N is not given (None)
        if self.topk is None:
            object.__setattr__(self, "topk", 1)
        if self.topk == 1 and self.num_draft_tokens == self.num_steps + 1:
            object.__setattr__(self, "num_draft_tokens", None)
        for name, meta, _ in settings_of():
            if meta.check is not None:
                meta.check(getattr(self, name))
        self._check_prompt()
        self._check_via()
        self.decoding()  # SGLang's flag rules refuse here, before any model loads

    def _check_via(self) -> None:
        if self.via != "trace":
            return
        if self.trace_from == "vllm" and bool(self.trace_url) == self.trace_launch:
            raise BadInput("--trace-from vllm needs one of --url URL (a vLLM serving the target) or --launch")
        if self.temperature > 0 and self.top_k != 1 and self.topk > 1:
            raise BadInput(
                "--via trace with --temperature gives a chain's expected acceptance (topk 1): a sampled tree "
                "replays with --via step"
            )

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

    @property
    def decides(self) -> tuple:
        """What this request asks of the decode, besides its pair and prompt: a stored run answers it
        when the run's request has the same (device and dtype are matched against what the run
        resolved, service/runs.py)."""
        return tuple((name, getattr(self, name)) for name, _, _ in settings_of("decides"))

    def settings(self) -> dict:
        """Every setting as asked (JSON values), for the run's stored params (service/run_value.py)."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, _, _ in settings_of()
            for value in [getattr(self, name)]
        }

    @classmethod
    def stored(cls, target: str, draft: str, prompt_ids, sample_ref, sample_id, asked: dict):
        """The request a stored run answered, from its columns and its stored settings (`asked`).
        None when the run has no prompt, or a stored value this version refuses (an older, looser
        bound): such a run's request cannot be read back exactly, so it answers no request (it is
        never reused for one it did not run) and the pages fall back to what the run itself holds."""
        if not prompt_ids:
            return None
        given = {
            name: tuple(asked[name]) if isinstance(asked[name], list) else asked[name]
            for name, _, _ in settings_of()
            if name in asked
        }
        try:
            return cls(
                target,
                draft,
                prompt_ids=tuple(prompt_ids),
                sample_ref=sample_ref,
                sample_id=sample_id,
                **given,
            )
        except (BadInput, TypeError):
            return None

    def decoding(self, architecture: str | None = None) -> Decoding:
        """How the replay drafts and accepts: SGLang's shape rules applied to the requested flags,
        and whose acceptance rule samples."""
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
        elif self.engine == "llamacpp" and self.ignore_eos:
            raise BadInput(
                "llama-server's ignore_eos biases every end-of-generation logit to -inf "
                "(tools/server/server-schema.cpp, field ignore_eos: logit_bias_eog), which changes the "
                "target's own tokens; it is not replayed"
            )
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
        return Decoding(shape, rule, greedy, notes)

    @property
    def label(self) -> str:
        return f"{self.settings_label} on {self.sample_ref or 'prompt'}"

    @property
    def settings_label(self) -> str:
        """The draft's name and what it is replayed with: "final K=4 topk=4 N=8 as vllm"."""
        from pathlib import Path

        override = f" wiring HF {list(self.aux_hf_indices)}" if self.aux_hf_indices else ""
        engine = "" if self.engine == "auto" else f" as {self.engine}"
        tree = f" topk={self.topk} N={self.num_draft_tokens}" if self.topk > 1 else ""
        sampled = f" T={self.temperature:g} seed={self.seed}" if self.temperature > 0 else ""
        return f"{Path(self.draft).name} K={self.num_steps}{tree}{sampled}{engine}{override}"
