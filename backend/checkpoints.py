"""Load a Hugging Face target and an EAGLE-3 draft from local directories, and check them first.

The preflight report lists every check with pass / warn / fail and a sentence a user understands;
a draft that fails preflight is never run (the silent failures of section 1 of the reference are
exactly what this refuses).
"""

from __future__ import annotations

import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from backend import BadInput
from backend.draft_config import KNOWN_ARCHITECTURES, DraftConfig, parse_draft_config, read_config_file
from backend.draft_model import Eagle3Draft
from backend.wiring import Wiring, resolve_wiring

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


# ---------------------------------------------------------------------------------------- target

@dataclass
class Target:
    model: torch.nn.Module
    tokenizer: object | None
    path: str
    device: torch.device
    dtype: torch.dtype
    num_layers: int
    hidden_size: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device, dtype: str | None = None) -> torch.dtype:
    if dtype:
        if dtype not in DTYPES:
            raise BadInput(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16")
        return DTYPES[dtype]
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def read_target_config(path: str | Path):
    path = Path(path)
    if not (path / "config.json").is_file():
        raise BadInput(f"target {path}: not a local Hugging Face model directory (no config.json)")
    return AutoConfig.from_pretrained(path, local_files_only=True)


def load_target(path: str | Path, device: str | None = None, dtype: str | None = None) -> Target:
    config = read_target_config(path)
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(torch_device, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch_dtype)
    model.to(torch_device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        tokenizer = None  # token ids still replay; the UI shows ids instead of text
    return Target(model, tokenizer, str(path), torch_device, torch_dtype, config.num_hidden_layers,
                  config.hidden_size, config.vocab_size, eos_ids(model))


def eos_ids(model) -> tuple[int, ...]:
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            return tuple(value) if isinstance(value, list | tuple) else (int(value),)
    return ()


# ----------------------------------------------------------------------------- draft checkpoint

@dataclass
class DraftFiles:
    config: DraftConfig
    tensors: dict[str, torch.Tensor]
    weights_file: str
    renamed: list[str] = field(default_factory=list)  # notes on names normalised from other layouts
    original_names: dict[str, str] = field(default_factory=dict)  # our name -> the file's name

    def file_name(self, name: str) -> str:
        """A name as this checkpoint's layout spells it, so messages match what the user sees."""
        if name in self.original_names:
            return self.original_names[name]
        if any(n.startswith("midlayer.") for n in self.original_names.values()) and name.startswith("layers.0."):
            return "midlayer." + name[len("layers.0."):]
        return name.replace("own_embedding.", "embed_tokens.")


def read_draft_tensors(draft_dir: Path) -> tuple[dict[str, torch.Tensor], str]:
    safetensors_path = draft_dir / "model.safetensors"
    bin_path = draft_dir / "pytorch_model.bin"
    if safetensors_path.is_file():
        return load_file(str(safetensors_path)), safetensors_path.name
    if bin_path.is_file():
        try:
            # A .bin is a pickle: only tensors and plain containers may come out of it.
            state = torch.load(bin_path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as error:
            raise BadInput(f"{bin_path.name} holds Python objects beyond tensors; refusing to unpickle it "
                           f"(loaded with weights_only=True): {str(error).splitlines()[0]}") from error
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise BadInput(f"{bin_path.name} is not a flat dict of tensors")
        return state, bin_path.name
    raise BadInput(f"{draft_dir}: no model.safetensors or pytorch_model.bin")


def normalise_names(tensors: dict[str, torch.Tensor]) -> tuple[dict, list[str], dict[str, str]]:
    """Map every layout's names to ours: `midlayer.*` (single layer) / `midlayers.i.*`, `layers.i.*`
    (vLLM speculators), and an optional `model.` prefix -> `layers.i.*`."""
    renamed, notes, original = {}, set(), {}
    for name, tensor in tensors.items():
        new = name
        if new.startswith("model."):
            new = new[len("model."):]
            notes.add("stripped a 'model.' prefix")
        if new.startswith("midlayer."):
            new = "layers.0." + new[len("midlayer."):]
            notes.add("midlayer.* read as layers.0.* (SpecForge/EAGLE layout)")
        elif new.startswith("midlayers."):
            new = "layers." + new[len("midlayers."):]
            notes.add("midlayers.i.* read as layers.i.*")
        elif new.startswith("embed_tokens."):
            new = "own_embedding." + new[len("embed_tokens."):]
        renamed[new] = tensor
        original[new] = name
    return renamed, sorted(notes), original


def read_draft(draft_dir: str | Path) -> DraftFiles:
    draft_dir = Path(draft_dir)
    if not draft_dir.is_dir():
        raise BadInput(f"draft {draft_dir}: no such directory")
    config = parse_draft_config(read_config_file(draft_dir))
    tensors, weights_file = read_draft_tensors(draft_dir)
    tensors, notes, original = normalise_names(tensors)
    return DraftFiles(config, tensors, weights_file, notes, original)


# ----------------------------------------------------------------------------------- preflight

@dataclass
class Check:
    name: str
    status: str  # pass | warn | fail
    message: str


@dataclass
class PreflightReport:
    checks: list[Check]
    wiring: Wiring | None

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks],
                "aux_hf_indices": list(self.wiring.aux_hf_indices) if self.wiring else [],
                "wiring_source": self.wiring.source if self.wiring else None}


IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


def preflight(draft_dir: str | Path, target_dir: str | Path, sample_length: int | None = None,
              aux_hf_indices: list[int] | None = None) -> PreflightReport:
    """Check a draft against a target without loading the target's weights."""
    target_config = read_target_config(target_dir)
    try:
        files = read_draft(draft_dir)
    except BadInput as error:
        return PreflightReport([Check("files", "fail", str(error))], None)
    return check_draft(files, target_config, sample_length, aux_hf_indices)


def check_draft(files: DraftFiles, target_config, sample_length: int | None = None,
                aux_hf_indices: list[int] | None = None) -> PreflightReport:
    checks: list[Check] = []
    add = lambda name, status, message: checks.append(Check(name, status, message))  # noqa: E731
    target_hidden, target_vocab = target_config.hidden_size, target_config.vocab_size
    config, tensors = files.config, files.tensors
    add("files", "pass", f"read {files.weights_file} ({len(tensors)} tensors)"
        + (f"; {'; '.join(files.renamed)}" if files.renamed else ""))
    _check_architecture(config, add)
    wiring = _check_wiring(config, target_config.num_hidden_layers, aux_hf_indices, add)
    _check_sizes(config, tensors, target_hidden, target_vocab, add)
    _check_vocab_mapping(config, tensors, target_vocab, add)
    _check_tensor_names(config, files, add)
    _check_dtypes(tensors, add)
    if sample_length is not None:
        limit = config.max_position_embeddings
        if sample_length > limit:
            add("context", "warn", f"the sequence ({sample_length} tokens) is longer than the draft's "
                f"max_position_embeddings ({limit}); drafts degrade past their trained context")
        else:
            add("context", "pass", f"sequence of {sample_length} tokens fits the draft's context ({limit})")
    return PreflightReport(checks, wiring)


def _check_architecture(config: DraftConfig, add) -> None:
    if config.architecture in KNOWN_ARCHITECTURES:
        add("architecture", "pass", f"{config.architecture}, {config.num_layers} decoder layer(s), "
            f"hidden {config.hidden_size}, RoPE {config.rope_description}")
    else:
        add("architecture", "warn", f"unknown architecture {config.architecture}; read as an EAGLE-3 Llama "
            f"draft ({', '.join(KNOWN_ARCHITECTURES)} are known)")
    if not config.use_aux_hidden_state:
        add("variant", "fail", "eagle_config.use_aux_hidden_state is false (EAGLE-1/2 style: last hidden, no "
            "fc); SpecLens replays EAGLE-3 drafts only")
    if config.unknown_flags:
        for name, value in config.unknown_flags.items():
            add("variant", "fail", f"unknown variant flag {name}={value}: it may change the draft's math and "
                "SpecLens does not implement it, so results would be wrong; refusing this checkpoint")
    else:
        on = [f for f in ("fc_norm", "norm_before_fc", "norm_before_residual") if getattr(config, f)]
        add("variant", "pass", "variant flags: " + (", ".join(on) if on else "none")
            + ("" if config.norm_output else ", norm_output=false"))
    if config.unknown_keys:
        add("config keys", "warn", f"config keys SpecLens does not use: {', '.join(sorted(config.unknown_keys))}")


def _check_wiring(config: DraftConfig, num_layers: int, override, add) -> Wiring | None:
    try:
        wiring = resolve_wiring(config, num_layers, override)
    except BadInput as error:
        add("wiring", "fail", str(error))
        return None
    add("wiring", "pass", f"aux HF indices {list(wiring.aux_hf_indices)} from {wiring.source}")
    indices = list(wiring.aux_hf_indices)
    if len(set(indices)) < 3 or indices != sorted(indices):
        add("wiring", "warn", f"aux HF indices {indices} are not three distinct ascending layers: the engines "
            "concatenate in ascending order; a target this shallow or an override like this rarely matches training")
    if config.nested_aux_ids is not None and config.top_level_aux_ids is not None:
        nested_hf = [i + 1 for i in config.nested_aux_ids]
        if nested_hf != config.top_level_aux_ids:
            add("wiring", "warn", f"nested ids (HF {nested_hf}) and top-level ids (HF {config.top_level_aux_ids}) "
                "disagree: SGLang reads the nested field, vLLM the top-level one; they will feed different layers")
    return wiring


def _check_sizes(config: DraftConfig, tensors, target_hidden: int, target_vocab: int, add) -> None:
    if config.target_hidden_size != target_hidden:
        add("target hidden", "fail" if "own_embedding.weight" not in tensors else "warn",
            f"draft target_hidden_size {config.target_hidden_size} != target hidden_size {target_hidden}")
    fc = tensors.get("fc.weight")
    if fc is not None:
        if fc.shape[1] == 3 * target_hidden:
            add("fc width", "pass", f"fc.weight {list(fc.shape)}: input 3 x {target_hidden} (three target states)")
        else:
            add("fc width", "fail", f"fc.weight input width {fc.shape[1]} != 3 x target hidden size {target_hidden} "
                f"(= {3 * target_hidden}): this draft was not trained on this target's three hidden states")
    if config.vocab_size != target_vocab:
        add("vocab", "warn", f"draft config vocab_size {config.vocab_size} != target vocab {target_vocab}")
    else:
        add("vocab", "pass", f"target vocab {target_vocab}, draft vocab {config.draft_vocab_size}")


def _check_vocab_mapping(config: DraftConfig, tensors, target_vocab: int, add) -> None:
    d2t, t2d = tensors.get("d2t"), tensors.get("t2d")
    draft_vocab = config.draft_vocab_size
    if d2t is None:
        if draft_vocab < target_vocab:
            add("d2t", "fail", f"draft vocab {draft_vocab} < target vocab {target_vocab} but the checkpoint has no "
                "d2t: draft ids would be read as target ids and every proposal would be garbage "
                "(EAGLE, SGLang and vLLM all do this silently)")
        else:
            add("d2t", "pass", "no d2t needed: draft and target share the vocabulary")
        return
    if d2t.ndim != 1 or d2t.shape[0] != draft_vocab:
        add("d2t", "fail", f"d2t has shape {list(d2t.shape)}, expected [{draft_vocab}] (draft_vocab_size)")
        return
    target_ids = torch.arange(draft_vocab) + d2t.long()
    if target_ids.min() < 0 or target_ids.max() >= target_vocab:
        add("d2t", "fail", f"d2t maps draft ids to target ids {int(target_ids.min())}..{int(target_ids.max())}, "
            f"outside the target vocab 0..{target_vocab - 1}")
        return
    if not bool((target_ids[1:] > target_ids[:-1]).all()):
        add("d2t", "fail", "d2t does not map draft ids to strictly increasing target ids (the layout EAGLE and "
            "SpecForge build); the mapping is corrupt or from another tool")
        return
    add("d2t", "pass", f"d2t maps {draft_vocab} draft ids into target ids {int(target_ids[0])}..{int(target_ids[-1])}")
    if t2d is None:
        add("t2d", "warn", "no t2d tensor (not used for replay; training tools need it)")
    elif t2d.shape[0] != target_vocab or int(t2d.bool().sum()) != draft_vocab or not bool(t2d.bool()[target_ids].all()):
        add("t2d", "fail", "t2d disagrees with d2t: they mark different target ids as in the draft vocab "
            "(a regenerated mapping? lm_head rows would not match their tokens)")
    else:
        add("t2d", "pass", "t2d agrees with d2t")


def _expected_shapes(config: DraftConfig) -> dict[str, tuple]:
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = Eagle3Draft(config, target_embedding=None)
    return {name: tuple(t.shape) for name, t in model.state_dict().items() if name != "d2t"}


def _check_tensor_names(config: DraftConfig, files: DraftFiles, add) -> None:
    tensors, show = files.tensors, files.file_name
    expected = _expected_shapes(config)
    optional = {"d2t", "t2d", "own_embedding.weight"}
    names = set(tensors)
    missing = sorted(set(expected) - names)
    ignorable = sorted(n for n in names - set(expected) - optional if n.endswith(IGNORABLE_SUFFIXES))
    unexpected = sorted(names - set(expected) - optional - set(ignorable))
    if missing:
        add("tensors", "fail", f"missing tensors (would stay random): {', '.join(map(show, missing))}")
    if unexpected:
        add("tensors", "fail", f"unexpected tensors (would be skipped silently): {', '.join(map(show, unexpected))}")
    if ignorable:
        add("tensors", "warn", f"ignored buffers recomputed from the config: {', '.join(map(show, ignorable))}")
    wrong = [f"{show(n)} {list(tensors[n].shape)} vs config {list(shape)}" for n, shape in expected.items()
             if n in tensors and tuple(tensors[n].shape) != shape]
    if wrong:
        add("shapes", "fail", "tensor shapes do not match config.json: " + "; ".join(wrong))
    elif not missing:
        add("shapes", "pass", f"all {len(expected)} expected tensors present with the shapes config.json implies")
    if "own_embedding.weight" in tensors:
        if config.target_hidden_size != config.hidden_size:
            add("embedding", "pass", "checkpoint carries its own embedding (target_hidden_size != hidden_size)")
        else:
            add("embedding", "warn", "checkpoint carries embed_tokens.weight; the target's embedding is used "
                "instead, as SGLang does")
    elif config.target_hidden_size != config.hidden_size:
        add("embedding", "fail", "target_hidden_size != hidden_size needs the draft's own embed_tokens.weight, "
            "which the checkpoint lacks")


def _check_dtypes(tensors, add) -> None:
    dtypes = sorted({str(t.dtype).replace("torch.", "") for n, t in tensors.items() if t.is_floating_point()})
    add("dtype", "pass" if len(dtypes) == 1 else "warn", f"weights stored as {', '.join(dtypes)}"
        + ("" if len(dtypes) == 1 else " (mixed precision in one checkpoint)"))


# --------------------------------------------------------------------------------- load draft

def load_draft(draft_dir: str | Path, target: Target, sample_length: int | None = None,
               aux_hf_indices: list[int] | None = None) -> Eagle3Draft:
    """Load a draft that passes preflight onto the target's device and dtype; the report (warnings
    included) stays on the draft as `preflight_report`, its resolved wiring as `wiring`."""
    files = read_draft(draft_dir)
    report = check_draft(files, target.model.config, sample_length, aux_hf_indices)
    if not report.ok:
        raise BadInput(f"draft {draft_dir} failed preflight: " + " | ".join(c.message for c in report.failures()))
    draft = Eagle3Draft(files.config, target.model.get_input_embeddings())
    tensors = dict(files.tensors)
    if "own_embedding.weight" in tensors and files.config.target_hidden_size != files.config.hidden_size:
        draft.own_embedding = torch.nn.Embedding(*tensors["own_embedding.weight"].shape)
    else:
        tensors.pop("own_embedding.weight", None)
    tensors.pop("t2d", None)
    draft.has_vocab_mapping = "d2t" in tensors
    tensors = {n: t for n, t in tensors.items() if not n.endswith(IGNORABLE_SUFFIXES)}
    result = draft.load_state_dict(tensors, strict=False)
    left_out = set(result.missing_keys) - {"d2t"}
    if left_out or result.unexpected_keys:  # preflight should have caught these; never run half-loaded
        raise BadInput(f"draft {draft_dir}: missing {sorted(left_out)}, unexpected {result.unexpected_keys}")
    draft.preflight_report, draft.wiring = report, report.wiring
    return draft.to(device=target.device, dtype=target.dtype).eval()
