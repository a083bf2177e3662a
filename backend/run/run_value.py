"""One run, stored and read back typed: the request as asked, and what the loaded pair resolved.

A run's params column is one flat JSON object: the request's settings (`ReplayRequest.settings`) and
the `Resolved` fields. Where an asked setting and a resolved field share a name (the engine: asked
"auto", resolved "eagle"; the tree flags: asked, then rewritten by SGLang's rules; the device), the
asked value is stored as `<name>_requested`; `aux_hf_indices` as asked is stored as `wiring_override`
(the run's column holds the wiring it was fed). `read_params` reads any stored params, older runs'
included: a field they lack takes its default, and the older layout (asked tree flags under
`requested`) is read too. Torch-free: the store and the pages read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import SimpleNamespace

from backend.plain import Plain, like
from backend.run.request import ReplayRequest, settings_of

STORED_AS = {"aux_hf_indices": "wiring_override"}  # the key runs have always stored it under


@dataclass(frozen=True)
class Resolved(Plain):
    """What the loaded pair made of a request: whose reading ran and how it was wired, the effective
    tree shape and acceptance rule, where and in what precision the target ran."""

    engine: str | None = None  # the reading that ran (the request may have asked auto)
    wiring_source: str = ""  # where the fed HF indices came from (the run's aux_hf_indices column)
    draft_math: dict = field(default_factory=dict)  # the draft's math under that reading
    num_steps: int = 4  # the effective shape after SGLang's rewrites
    topk: int = 1
    num_draft_tokens: int | None = None  # N verified incl. the root; a chain: K + 1
    sampling_rule: str | None = None  # whose sampled acceptance; None: greedy acceptance
    draft_attention: str | None = None  # trees only (None for a chain)
    mode: str = "chain greedy"  # how it drafted and accepted, in words (`describe_mode`)
    device: str | None = None
    dtype: str | None = None
    target_placement: object = None  # where the target's modules ran (a split target: per device)
    target_forward: str | None = None  # SpecLens's lean forward or transformers' (lean_target.py)
    decoding_notes: tuple[str, ...] = ()  # SGLang's rewrites and every engine disagreement
    draft_method: str = "eagle3"  # eagle3, or dflash (a block of K + 1 in one forward; older runs: eagle3)

    @property
    def greedy(self) -> bool:
        return self.sampling_rule is None

    @property
    def greedy_chain(self) -> bool:
        """A chain accepted greedily: what the what-if, the served-number comparisons and the
        chain-length advice read."""
        return self.topk == 1 and self.greedy


def describe_mode(topk: int, num_draft_tokens, greedy: bool, asked) -> str:
    """'chain greedy', 'tree k=4 N=8 sampled T=0.7 seed=0', ... (`asked`: the request, or anything
    with its temperature, top_p, top_k and seed)."""
    shape = "chain" if topk == 1 else f"tree k={topk} N={num_draft_tokens}"
    if greedy:
        return f"{shape} greedy"
    extra = (f" top_p={asked.top_p:g}" if asked.top_p != 1.0 else "") + (
        f" top_k={asked.top_k}" if asked.top_k not in (0, -1) else ""
    )
    return f"{shape} sampled T={asked.temperature:g}{extra} seed={asked.seed}"


RESOLVED_NAMES = {f.name for f in fields(Resolved)}


def stored_key(name: str) -> str:
    return STORED_AS.get(name) or (f"{name}_requested" if name in RESOLVED_NAMES else name)


def params(request: ReplayRequest, resolved: Resolved) -> dict:
    """The run's params column: the request's settings as asked, and what the pair resolved."""
    asked = {stored_key(name): value for name, value in request.settings().items()}
    return {**asked, **resolved.to_dict()}


def asked_settings(raw: dict) -> dict:
    """The settings a stored run was asked for, by request field name (older layouts read too)."""
    older = dict(raw.get("requested") or {})  # runs stored before this layout: the tree flags as asked
    asked = {}
    for name, _, _ in settings_of():
        key = stored_key(name)
        if key in raw:
            asked[name] = raw[key]
        elif name in older:
            asked[name] = older[name]
        elif name == "draft_attention" and raw.get("draft_attention"):
            asked[name] = raw["draft_attention"]  # older runs kept it for trees only
        elif name == "num_steps" and "num_steps" in raw:
            asked[name] = raw["num_steps"]
    return asked


def read_params(raw: dict | None) -> Resolved:
    """What a stored run resolved, from its params (any layout; `mode` recomputed where missing)."""
    raw = dict(raw or {})
    resolved = Resolved.from_stored(raw)
    if "mode" in raw:
        return resolved
    sampling = SimpleNamespace(
        **{name: like(raw.get(name), default) for name, default in SAMPLING_DEFAULTS.items()}
    )
    return replace(
        resolved, mode=describe_mode(resolved.topk, resolved.num_draft_tokens, resolved.greedy, sampling)
    )


SAMPLING_DEFAULTS = {n: d for n, _, d in settings_of() if n in ("temperature", "top_p", "top_k", "seed")}


def id_ranges(ids) -> str:
    """Run ids as `lost --runs` reads them back: 3,4,5,9 -> "3-5,9"."""
    ranges: list[list[int]] = []
    for run_id in sorted(set(ids)):
        if ranges and run_id == ranges[-1][1] + 1:
            ranges[-1][1] = run_id
        else:
            ranges.append([run_id, run_id])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
