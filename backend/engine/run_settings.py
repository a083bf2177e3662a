"""How a run ran, stored with it and read back typed (torch-free: the store and the pages read it).

A run's params column holds `RunSettings.to_dict()`. `RunSettings.from_dict` reads any stored params
back, older runs' included: a field they lack takes its default (runs stored before trees and sampling
existed are greedy chains), a key it does not know is kept in `extra`, so nothing stored is lost.
`asked` is the part a request decides; a stored run answers a request when the two are equal
(service/runs.py::find_finished_run).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


def _ids(value) -> tuple[int, ...] | None:
    return tuple(int(i) for i in value) if value else None


def _float(value, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class AskedSettings:
    """What a request decides about a run, besides its target, draft and prompt: K, the effective tree
    shape, max new tokens, sampling, the engine reading asked for and the wiring override."""

    num_steps: int
    topk: int
    num_draft_tokens: int | None
    max_new_tokens: int
    engine_requested: str
    wiring_override: tuple[int, ...] | None
    temperature: float
    top_p: float
    top_k: int
    seed: int
    draft_attention: str | None  # trees only (None for a chain)


@dataclass(frozen=True)
class RunSettings:
    num_steps: int = 4  # K
    max_new_tokens: int = 128
    record: bool = True
    device: str | None = None
    dtype: str | None = None
    target_placement: object = None  # where the target's modules ran (a split target: per device)
    target_forward: str | None = None  # SpecLens's lean forward or transformers' (lean_target.py)
    wiring_source: str = ""
    wiring_override: tuple[int, ...] | None = None
    engine: str | None = None  # the reading the run used
    engine_requested: str = "auto"
    draft_math: dict = field(default_factory=dict)
    topk: int = 1
    num_draft_tokens: int | None = None  # N verified incl. the root; a chain: K + 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    sampling_rule: str | None = None  # None: greedy acceptance
    draft_attention: str | None = None
    requested: dict | None = None  # the tree flags as asked, before SGLang's rewrites
    decoding_notes: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)  # stored keys this version does not know

    @classmethod
    def from_dict(cls, raw: dict | None) -> RunSettings:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)} - {"extra"}
        base = cls()
        return cls(
            num_steps=_int(raw.get("num_steps"), base.num_steps),
            max_new_tokens=_int(raw.get("max_new_tokens"), base.max_new_tokens),
            record=bool(raw.get("record", True)),
            device=raw.get("device"),
            dtype=raw.get("dtype"),
            target_placement=raw.get("target_placement"),
            target_forward=raw.get("target_forward"),
            wiring_source=raw.get("wiring_source") or "",
            wiring_override=_ids(raw.get("wiring_override")),
            engine=raw.get("engine"),
            engine_requested=raw.get("engine_requested") or "auto",
            draft_math=dict(raw.get("draft_math") or {}),
            topk=_int(raw.get("topk") or 1, 1),
            num_draft_tokens=None
            if raw.get("num_draft_tokens") is None
            else _int(raw["num_draft_tokens"], 0),
            temperature=_float(raw.get("temperature") or 0.0, 0.0),
            top_p=_float(raw.get("top_p", 1.0), 1.0),
            top_k=_int(raw.get("top_k") or 0, 0),
            seed=_int(raw.get("seed") or 0, 0),
            sampling_rule=raw.get("sampling_rule") or None,
            draft_attention=raw.get("draft_attention"),
            requested=raw.get("requested"),
            decoding_notes=tuple(raw.get("decoding_notes") or ()),
            extra={k: v for k, v in raw.items() if k not in known},
        )

    def to_dict(self) -> dict:
        out = asdict(self)
        extra = out.pop("extra")
        out["wiring_override"] = list(self.wiring_override) if self.wiring_override else None
        out["decoding_notes"] = list(self.decoding_notes)
        return {**extra, **out}

    @property
    def asked(self) -> AskedSettings:
        return AskedSettings(
            self.num_steps,
            self.topk,
            self.num_draft_tokens,
            self.max_new_tokens,
            self.engine_requested,
            self.wiring_override,
            self.temperature,
            self.top_p,
            self.top_k,
            self.seed,
            self.draft_attention if self.topk > 1 else None,
        )

    @property
    def greedy(self) -> bool:
        """Greedy acceptance: temperature 0 (or top-k 1 sampling, which is greedy)."""
        return self.sampling_rule is None

    @property
    def greedy_chain(self) -> bool:
        """A chain (topk 1) accepted greedily: what the what-if, the served-number comparisons and the
        chain-length advice read."""
        return self.topk == 1 and self.greedy

    @property
    def mode(self) -> str:
        """How the run drafted and accepted: "chain greedy", "tree k=4 N=8 sampled T=0.7", ..."""
        shape = "chain" if self.topk == 1 else f"tree k={self.topk} N={self.num_draft_tokens}"
        if self.temperature == 0 or self.top_k == 1:
            return f"{shape} greedy"
        extra = (f" top_p={self.top_p:g}" if self.top_p != 1.0 else "") + (
            f" top_k={self.top_k}" if self.top_k not in (0, -1) else ""
        )
        return f"{shape} sampled T={self.temperature:g}{extra} seed={self.seed}"
