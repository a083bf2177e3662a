"""A DFlash draft's config.json, read the way z-lab's reference reads it (torch-free).

DFlash (z-lab/dflash, `dflash/model.py` `DFlashDraftModel`) is a block-diffusion drafter: it reads
several target layers, projects them once (`fc`, `hidden_norm`) into the K/V context of every draft
layer, and proposes a whole block of drafts in one forward over [last token, mask x K]. Its
config.json is a Qwen3Config plus:
- `block_size` (top level; SGLang also reads `dflash_config.block_size`): the block it was trained on;
- `num_target_layers` (top level, or in `dflash_config`): the target's depth;
- `dflash_config.target_layer_ids`: z-lab layer ids, id l = HF `hidden_states[l + 1]` (the output of
  decoder layer l); absent: `build_target_layer_ids(num_target_layers, num_hidden_layers)`;
- `dflash_config.mask_token_id`: the id whose embedding fills the block's masked slots.
No `embed_tokens` or `lm_head`: both are the target's.

DFlash2 and DSpark checkpoints (`DFlash2DraftModel`, `DSparkDraftModel`, a `projector_type`, the
DSpark `markov_*` keys) are recognised and said unsupported here (`method_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend import BadInput

DFLASH = "dflash"
EAGLE3 = "eagle3"
# Architectures of block drafters this replay does not run yet (each engine's own reading differs).
OTHER_BLOCK_DRAFTERS = {
    "DFlash2DraftModel": "DFlash2",
    "DSparkDraftModel": "DSpark",
}
QWEN3_ROPE_THETA = 10000.0  # Qwen3Config's default, what z-lab's reference falls back to


def method_of(raw: dict, where: str = "config.json") -> str:
    """EAGLE3 or DFLASH, from a draft's config.json; BadInput for a block drafter not replayed yet."""
    architectures = raw.get("architectures")
    architectures = architectures if isinstance(architectures, list) else []  # the loader says what is wrong
    for name in architectures:
        if name in OTHER_BLOCK_DRAFTERS:
            raise BadInput(
                f"{where}: a {OTHER_BLOCK_DRAFTERS[name]} draft ({name}); SpecLens replays EAGLE-3 and "
                "DFlash drafts (vLLM's CPU build refuses DFlash2 and DSpark too: they need its V2 runner)"
            )
    dflash = raw.get("dflash_config")
    if isinstance(dflash, dict) and (
        dflash.get("projector_type") or any(k.startswith("markov") for k in raw)
    ):
        raise BadInput(
            f"{where}: a DFlash variant (projector_type or markov heads) SpecLens does not replay yet"
        )
    if isinstance(dflash, dict) or any("DFlash" in str(name) for name in architectures):
        return DFLASH
    return EAGLE3


def is_dflash(draft_dir) -> bool:
    """Whether the folder holds a DFlash draft (its config.json's method); BadInput for a block drafter
    SpecLens does not replay, or an unreadable config. False where there is no config.json (the loader
    says what is missing)."""
    from backend.drafts.json_config import read_json_object

    config = Path(draft_dir) / "config.json"
    if not Path(draft_dir).is_dir() or not config.is_file():
        return False
    return method_of(read_json_object(config), str(config)) == DFLASH


def target_layer_ids(num_target_layers: int, count: int) -> list[int]:
    """z-lab's `build_target_layer_ids` (dflash/model.py): `count` ids spread over 1..N-3 (one: N // 2)."""
    if count == 1:
        return [num_target_layers // 2]
    return [int(round(1 + i * (num_target_layers - 4) / (count - 1))) for i in range(count)]


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float | None  # None: absent from the file (z-lab falls back to 1e4, vLLM to 1e6)
    block_size: int
    mask_token_id: int | None
    target_layer_ids: list[int]  # z-lab ids: HF hidden_states[id + 1]
    layer_ids_declared: bool  # False: derived from num_target_layers (build_target_layer_ids)
    num_target_layers: int | None
    hidden_act: str = "silu"
    attention_bias: bool = False
    sliding_window: int | None = None
    layer_types: list[str] = field(default_factory=list)
    architecture: str = "DFlashDraftModel"
    max_position_embeddings: int = 40960  # Qwen3Config's default

    method = DFLASH

    @property
    def aux_hf_indices(self) -> tuple[int, ...]:
        """The HF hidden_states indices the draft reads, in its order (z-lab id + 1)."""
        return tuple(i + 1 for i in self.target_layer_ids)

    @property
    def num_drafts(self) -> int:
        """The drafts a block trained as `block_size` proposes: block_size - 1 (the engines' K)."""
        return self.block_size - 1

    @property
    def effective_rope_theta(self) -> float:
        return QWEN3_ROPE_THETA if self.rope_theta is None else self.rope_theta


def _int(raw: dict, key: str, where: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadInput(f"{where}: {key} must be a positive integer (found {value!r})")
    return value


def _check_replayable(raw: dict, where: str) -> None:
    """What the replay's DFlash layer runs: full attention, SwiGLU with silu, default RoPE."""
    layer_types = raw.get("layer_types") or []
    if raw.get("use_sliding_window") or any(t != "full_attention" for t in layer_types if isinstance(t, str)):
        raise BadInput(
            f"{where}: sliding-window layers (layer_types {layer_types}): SpecLens replays full attention only"
        )
    if str(raw.get("hidden_act", "silu")) != "silu":
        raise BadInput(
            f"{where}: hidden_act {raw.get('hidden_act')!r}: SpecLens replays silu DFlash layers only"
        )
    scaling = raw.get("rope_scaling") or (raw.get("rope_parameters") or {}).get("rope_type")
    if scaling not in (None, "default") and not (
        isinstance(scaling, dict) and scaling.get("rope_type") in (None, "default")
    ):
        raise BadInput(
            f"{where}: rope_scaling {scaling!r}: SpecLens replays DFlash drafts with default RoPE only"
        )


def parse_dflash_config(raw: dict, where: str = "draft config.json") -> DFlashConfig:
    """The DFlash config, checked; BadInput naming the file and the field on anything it cannot run."""
    dflash = raw.get("dflash_config")
    if dflash is None:
        dflash = {}
    if not isinstance(dflash, dict):
        raise BadInput(f"{where}: dflash_config must be an object (found {type(dflash).__name__})")
    hidden = _int(raw, "hidden_size", where)
    heads = _int(raw, "num_attention_heads", where)
    layers = _int(raw, "num_hidden_layers", where)
    block = dflash.get("block_size", raw.get("block_size"))
    if isinstance(block, bool) or not isinstance(block, int) or block < 2:
        raise BadInput(
            f"{where}: block_size must be an integer >= 2 (found {block!r}; z-lab reads the top-level key)"
        )
    depth = dflash.get("num_target_layers", raw.get("num_target_layers"))
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise BadInput(f"{where}: num_target_layers must be a positive integer (found {depth!r})")
    ids = dflash.get("target_layer_ids")
    declared = ids is not None
    if ids is None:
        if depth is None:
            raise BadInput(
                f"{where}: neither dflash_config.target_layer_ids nor num_target_layers: the target layers "
                "the draft reads cannot be known"
            )
        ids = target_layer_ids(depth, layers)
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise BadInput(f"{where}: dflash_config.target_layer_ids must be a list of integers (found {ids!r})")
    if any(i < 0 for i in ids):
        raise BadInput(f"{where}: dflash_config.target_layer_ids {ids}: z-lab ids are layer numbers, >= 0")
    mask = dflash.get("mask_token_id")
    if mask is not None and (isinstance(mask, bool) or not isinstance(mask, int) or mask < 0):
        raise BadInput(f"{where}: dflash_config.mask_token_id must be a token id (found {mask!r})")
    theta = raw.get("rope_theta", (raw.get("rope_parameters") or {}).get("rope_theta"))
    _check_replayable(raw, where)
    architectures = raw.get("architectures") or ["DFlashDraftModel"]
    return DFlashConfig(
        hidden_size=hidden,
        intermediate_size=_int(raw, "intermediate_size", where),
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=_int(raw, "num_key_value_heads", where, heads),
        head_dim=_int(raw, "head_dim", where, hidden // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=None if theta is None else float(theta),
        block_size=block,
        mask_token_id=mask,
        target_layer_ids=list(ids),
        layer_ids_declared=declared,
        num_target_layers=depth,
        hidden_act=str(raw.get("hidden_act", "silu")),
        attention_bias=bool(raw.get("attention_bias", False)),
        sliding_window=raw.get("sliding_window") if raw.get("use_sliding_window") else None,
        layer_types=list(raw.get("layer_types") or []),
        architecture=str(architectures[0]),
        max_position_embeddings=_int(raw, "max_position_embeddings", where, 40960),
    )
