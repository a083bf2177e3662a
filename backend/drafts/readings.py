"""How each engine reads an EAGLE-3 draft directory (docs/reference.md §10).

A reading decides which target hidden states feed the draft (where the aux ids come from and in
which convention), which variant flags count and what they mean, whose embedding the draft uses
and how draft ids map to target ids. The same directory read by two engines can feed different
layers or different math: that disagreement is the seed story's bug class, so SpecLens can replay
a draft as any engine runs it and `disagreements` says where the engines part ways.

Every rule cites the engine source it follows (read 2026-08; commits in docs/reference.md §10).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from backend import BadInput
from backend.drafts.dflash_config import DFLASH
from backend.drafts.dflash_readings import dflash_reading
from backend.drafts.draft_config import VARIANT_FLAGS, DraftConfig
from backend.drafts.engine_readers import READERS, DraftFacts, DraftMath, vocab_mapping
from backend.plain import Plain
from backend.run.engine_names import DESCRIPTIONS, ENGINES, SERVING_ENGINES
from backend.run.wiring import Wiring, check_indices, override_wiring

__all__ = ["DESCRIPTIONS", "ENGINES", "SERVING_ENGINES", "VARIANT_FLAGS"]  # read here by the readings' users


@dataclass(frozen=True)
class EngineView:
    """One engine's reading of one draft on one target: what it would run."""

    engine: str
    wiring: Wiring
    math: DraftMath
    vocab_mapping: str  # how draft ids become target ids
    loads: bool
    refusal: str | None  # why this engine cannot run the draft (None when it can)
    notes: tuple[str, ...]  # what the engine drops or assumes silently
    # How the engine drafts near the end of a generation and counts a step (step_state.ACCOUNTING):
    # "fixed-k" drafts K every step and cuts what passes the budget; "llamacpp" drafts fewer.
    accounting: str = "fixed-k"

    def reading(self) -> EngineReading:
        """This view as the engine tables show it (preflight's JSON, the pages)."""
        return EngineReading(
            engine=self.engine,
            aux_hf_indices=list(self.wiring.aux_hf_indices),
            wiring_source=self.wiring.source,
            **asdict(self.math),
            feedback="post-norm" if self.math.post_norm_feedback else "pre-norm",
            embedding="draft's own embed_tokens" if self.math.own_embedding else "target's",
            vocab_mapping=self.vocab_mapping,
            loads=self.loads,
            refusal=self.refusal,
            notes=list(self.notes),
            accounting=self.accounting,
        )


@dataclass(frozen=True)
class EngineReading(Plain):
    """One engine's reading as JSON: the wiring it feeds, DraftMath's switches (and the feedback and
    embedding in words), the vocab mapping, whether it loads the draft and what it drops silently."""

    engine: str
    aux_hf_indices: list[int]
    wiring_source: str = ""
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_before_residual: bool = False
    norm_before_lm_head: bool = True
    post_norm_feedback: bool = False
    own_embedding: bool = False
    qk_norm: bool = False
    feedback: str = "pre-norm"
    embedding: str = "target's"
    vocab_mapping: str = ""
    loads: bool = True
    refusal: str | None = None
    notes: list[str] = field(default_factory=list)
    accounting: str = "fixed-k"


def training_engine(config: DraftConfig) -> str:
    """The reading of the tool that most likely wrote the checkpoint: what the draft was trained as."""
    if config.speculators_format:
        return "speculators"
    if config.architecture == "LlamaForCausalLM":
        return "eagle"
    return "specforge"


def resolve_engine(name: str | None, config: DraftConfig) -> str:
    """'auto' (or None) -> the training reading; otherwise a known engine name."""
    if name in (None, "", "auto"):
        return training_engine(config)
    if name not in ENGINES:
        raise BadInput(f"unknown engine {name!r}; use auto or one of {', '.join(ENGINES)}")
    return name


def read_as(
    engine: str,
    config: DraftConfig,
    num_target_layers: int,
    has_own_embedding: bool,
    own_embedding_differs: bool | None = None,
) -> EngineView:
    """How `engine` reads this draft for a target of `num_target_layers` layers.

    `has_own_embedding`: the checkpoint carries embed_tokens.weight; `own_embedding_differs`: it
    differs from the target's (None when unknown: then assumed to differ). `auto` (or None) is the
    training engine's reading with nothing the config declares replaced by a default (`as_declared`)."""
    if engine in (None, "", "auto"):
        view = _read(
            training_engine(config), config, num_target_layers, has_own_embedding, own_embedding_differs
        )
        return as_declared(view, config, num_target_layers)
    return _read(
        resolve_engine(engine, config), config, num_target_layers, has_own_embedding, own_embedding_differs
    )


def as_declared(view: EngineView, config: DraftConfig, num_target_layers: int) -> EngineView:
    """The default reading never replaces a declared field with a default. A field the training engine
    ignores was written for an engine that reads it (SpecForge never writes a top-level id list; EAGLE
    reads no id at all), so that engine's meaning is taken and the reading says so:
    - aux ids: top-level ids are HF indices (vLLM, speculators), nested ids output-of-layer ids (SGLang,
      SpecForge: HF = id + 1);
    - fc_norm / norm_before_fc / norm_before_residual: applied as vLLM and speculators apply them;
    - norm_output on a draft EAGLE would read: the post-norm feedback, as vLLM and speculators read it.
    rope_*, draft_vocab_size and max_position_embeddings are read by every engine from the draft's
    config already (backend/drafts/draft_config.py), so nothing is replaced there."""
    nested, top = config.nested_aux_ids, config.top_level_aux_ids
    name = DESCRIPTIONS[view.engine]
    wiring, math, notes = view.wiring, view.math, list(view.notes)
    reads_nested = view.engine in ("specforge", "sglang")
    reads_top = view.engine in ("vllm", "vllm-v2", "llamacpp", "speculators")
    if top is not None and nested is None and not reads_top:
        wiring = Wiring(
            tuple(top),
            f"declared top-level ids {top} (HF indices, as vLLM and speculators read them); "
            f"{name} ignores a top-level list and would run {list(view.wiring.aux_hf_indices)}",
        )
    elif nested is not None and not reads_nested and (top is None or view.engine == "eagle"):
        wiring = Wiring(
            tuple(i + 1 for i in nested),
            f"declared eagle_config ids {nested} (output-of-layer ids, HF = id + 1, as SGLang and SpecForge "
            f"read them); {name} ignores them and would run {list(view.wiring.aux_hf_indices)}",
        )
    honoured = []
    for flag in ("fc_norm", "norm_before_fc", "norm_before_residual"):
        if getattr(config, flag) and not getattr(math, flag):
            math = replace(math, **{flag: True})
            honoured.append(flag)
    if view.engine == "eagle" and config.norm_output and not math.post_norm_feedback:
        math = replace(math, post_norm_feedback=True)
        honoured.append("norm_output (post-norm feedback)")
    if honoured:
        notes = [n for n in notes if not any(f.split(" ")[0] in n for f in honoured)]
        notes.append(
            f"{', '.join(honoured)} declared: applied as vLLM and speculators apply "
            f"{'it' if len(honoured) == 1 else 'them'} ({name} has no such module)"
        )
    if wiring is view.wiring and not honoured:
        return view
    refusal = view.refusal
    if wiring is not view.wiring:
        notes.append(f"wiring: {wiring.source}")
        try:
            check_indices(wiring.aux_hf_indices, num_target_layers)
        except BadInput as error:
            refusal = refusal or f"the declared wiring: {error}"
    return replace(view, wiring=wiring, math=math, notes=tuple(notes), loads=refusal is None, refusal=refusal)


def _read(
    engine: str,
    config: DraftConfig,
    num_target_layers: int,
    has_own_embedding: bool,
    own_embedding_differs: bool | None,
) -> EngineView:
    differs = True if own_embedding_differs is None else own_embedding_differs
    reading = READERS[engine](DraftFacts(config, num_target_layers, has_own_embedding, differs))
    math, refusal = reading.math, reading.refusal
    if has_own_embedding and config.target_hidden_size != config.hidden_size and not math.own_embedding:
        math = replace(math, own_embedding=True)  # the target's embedding has the wrong width: every engine
    try:
        check_indices(reading.wiring.aux_hf_indices, num_target_layers)
    except BadInput as error:
        refusal = refusal or f"{DESCRIPTIONS[engine]}: {error}"
    return EngineView(
        engine,
        reading.wiring,
        math,
        vocab_mapping(config),
        refusal is None,
        refusal,
        tuple(reading.notes),
        reading.accounting,
    )


def declared_wiring(config: DraftConfig, num_target_layers: int) -> Wiring:
    """The wiring the draft declares: the training reading's, with nothing declared replaced by a
    default (`read_as("auto")`). BadInput when it does not fit the target."""
    wiring = read_as("auto", config, num_target_layers, False).wiring
    check_indices(wiring.aux_hf_indices, num_target_layers)
    return wiring


def fed_wiring(view: EngineView, override, num_target_layers: int) -> Wiring:
    """The HF indices fed to the draft: the `override` (checked against the target's depth in
    wiring.override_wiring), else what `view`'s engine reads (checked in `_read`). BadInput when that
    engine cannot run the draft. The one rule: preflight, replays, the teacher, the probe and every
    dashboard job reach it (through run/request.py::reading_of where a draft is loaded)."""
    if isinstance(override, Wiring):  # checked already, against the target's config before it loaded
        return override  # (service/checkpoints.py checked_override)
    if override is not None:
        return override_wiring(override, num_target_layers)
    if not view.loads:
        raise BadInput(view.refusal)
    return view.wiring


def dflash_view(engine: str | None, config, num_target_layers: int) -> EngineView:
    """`engine`'s reading of a DFlash draft (backend/drafts/dflash_readings.py)."""
    return EngineView(**dflash_reading(engine, config, num_target_layers))


def fed_dflash(engine: str, override, config, num_target_layers: int) -> tuple[EngineView, Wiring]:
    """A DFlash draft's reading (backend/drafts/dflash_readings.py): BadInput where that engine cannot
    run it or an EAGLE-3 override is given."""
    if override is not None:
        raise BadInput(
            "a DFlash draft reads the layers its dflash_config.target_layer_ids names (z-lab ids, HF = id + 1): "
            "edit them there; --aux-hf-indices overrides an EAGLE-3 draft's three"
        )
    view = dflash_view(engine, config, num_target_layers)
    if view.refusal:
        raise BadInput(f"{view.engine}: {view.refusal}")
    return view, view.wiring


def reading_of(engine: str, override, draft, num_target_layers: int) -> tuple[EngineView, Wiring]:
    """`engine`'s view of the loaded draft and the HF indices it is fed: the `override` (checked
    against the target's depth in backend/run/wiring.py override_wiring, the one depth check), else what that engine
    reads (checked in the readings). BadInput when that engine cannot run the draft. The one place a
    replay, the teacher and the probe decide what feeds the draft."""
    if getattr(draft.config, "method", None) == DFLASH:
        return fed_dflash(engine, override, draft.config, num_target_layers)
    view = read_as(
        engine,
        draft.config,
        num_target_layers,
        draft.own_embedding is not None,
        getattr(draft, "own_embedding_differs", None),
    )
    try:
        return view, fed_wiring(view, override, num_target_layers)
    except BadInput as error:  # say what the file holds: the reading shifts nested ids by one
        if override is not None:  # the override was refused, not the config's ids
            raise
        config = draft.config
        declared = [
            f"{name} {ids}"
            for name, ids in (("nested", config.nested_aux_ids), ("top-level", config.top_level_aux_ids))
            if ids is not None
        ]
        if not declared:
            raise
        raise BadInput(f"{error} (the draft's config.json declares {' and '.join(declared)})") from None
