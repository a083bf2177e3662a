"""Load a Hugging Face target and an EAGLE-3 draft from local directories (docs/reference.md §1).

Nothing is fetched from a hub (`local_files_only=True`); a draft's `.bin` is unpickled with
`weights_only=True` only. A draft is loaded only after `backend.engine.preflight` passed on the very
tensors read here (the files are read once).
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from backend import BadInput, first_line
from backend.drafts.draft_config import DraftConfig, read_draft_config
from backend.drafts.json_config import TOKENIZER_FILES, config_sizes, read_json_object
from backend.drafts.layouts import file_name, to_internal_names
from backend.drafts.readings import read_as
from backend.drafts.safetensors_header import check_safetensors
from backend.drafts.torch_files import load_refused
from backend.engine.draft_model import Eagle3Draft
from backend.target.lean_target import target_runner
from backend.target.target_runner import TargetRunner

DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}
# Buffers some exports carry that are recomputed from the config.
IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


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
    runner: TargetRunner | None = None  # its forward (backend/target/target_runner.py)

    def __post_init__(self):
        if self.runner is None:  # chosen once, when the target is loaded
            self.runner = target_runner(self.model)


def pick_device(device: str | None = None) -> torch.device:
    """The device named (cpu, cuda, cuda:N, mps), checked to exist here; else CUDA when there is one."""
    if not device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise BadInput(f"--device {device!r}: not a device name (cpu, cuda, cuda:N, mps)") from None
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise BadInput(
                f"--device {device}: no CUDA device here (torch {torch.__version__}); use --device cpu"
            )
        if chosen.index is not None and chosen.index >= count:
            raise BadInput(f"--device {device}: this machine has {count} CUDA device(s), 0..{count - 1}")
    elif chosen.type == "mps" and not torch.backends.mps.is_available():
        raise BadInput(f"--device {device}: MPS is not available here; use --device cpu")
    elif chosen.type not in ("cpu", "cuda", "mps"):
        raise BadInput(f"--device {device}: SpecLens runs on cpu, cuda or mps")
    return chosen


def pick_dtype(device: torch.device, dtype: str | None = None) -> torch.dtype:
    if dtype:
        if dtype not in DTYPES:
            raise BadInput(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16")
        return DTYPES[dtype]
    return torch.bfloat16 if device.type == "cuda" else torch.float32


TARGET_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


def read_target_config(path: str | Path):
    """The target's config, checked: UTF-8 JSON, positive integer sizes, and a config transformers
    can build. Every failure is a BadInput naming the file."""
    path = Path(path)
    file = path / "config.json"
    if not file.is_file():
        raise BadInput(f"target {path}: not a local Hugging Face model directory (no config.json)")
    config_sizes(read_json_object(file), file, TARGET_SIZES)
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - transformers' many config errors: the file is the cause
        raise BadInput(f"{file}: transformers cannot read it ({first_line(error)})") from None


def tokenizer_problem(path: str | Path) -> str:
    """Why `path` gives no tokenizer, in one line naming the file: none there, or one that does not
    load (its error's first line)."""
    files = [Path(path) / name for name in TOKENIZER_FILES if (Path(path) / name).is_file()]
    if not files:
        return f"{path} has no tokenizer ({', '.join(TOKENIZER_FILES)})"
    try:
        AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - what the user is told
        return f"{files[0]}: the tokenizer does not load ({type(error).__name__}: {first_line(error)[:160]})"
    return f"{path}: the tokenizer loads now (it did not before)"


def load_tokenizer(path: str | Path):
    """The target's tokenizer, or None when the directory has none or it cannot be loaded offline
    (ids are then shown as ids). transformers 4.x raises a zoo of errors for a directory without one."""
    if not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means: no usable tokenizer
        return None


def load_target(
    path: str | Path,
    device: str | None = None,
    dtype: str | None = None,
    device_map: str | None = None,
    max_memory: str | None = None,
) -> Target:
    """`device_map` / `max_memory`: split the target across devices with accelerate's dispatch
    (backend/target/dispatch.py); the Target's device is then where its forward starts."""
    from backend.target.dispatch import dispatch_kwargs, execution_device

    config = read_target_config(path)
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(torch_device, dtype)
    dispatch = dispatch_kwargs(device_map, max_memory)
    for weights in sorted(Path(path).glob("*.safetensors")):
        check_safetensors(weights)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch_dtype, **dispatch
        )
    except ImportError as error:  # device_map needs accelerate
        raise BadInput(f"target {path}: --device-map needs the accelerate package ({error})") from None
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise BadInput(f"target {path}: cannot load the model ({first_line(error)})") from None
    except pickle.UnpicklingError as error:  # a .bin that torch.load(weights_only=True) refuses
        bins = sorted(Path(path).glob("*.bin"))
        where = bins[0] if len(bins) == 1 else f"target {path} (*.bin)"
        raise load_refused(
            where, error, "a model's weights are tensors: save them as model.safetensors"
        ) from None
    if dispatch:
        torch_device = execution_device(model, torch_device)
        model.eval()
    else:
        model.to(torch_device).eval()
    return target_of(model, path, config, torch_device, torch_dtype)


def target_of(model, path, config, device: torch.device, dtype: torch.dtype, runner=None) -> Target:
    """The Target of a loaded `model` (or of what stands for it: engine/draft_side.py) read from `path`:
    its tokenizer, sizes and end-of-generation ids."""
    return Target(
        model,
        load_tokenizer(path),
        str(path),
        device,
        dtype,
        config.num_hidden_layers,
        config.hidden_size,
        config.vocab_size,
        eos_ids(model),
        runner,
    )


def eos_ids(model) -> tuple[int, ...]:
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            return tuple(value) if isinstance(value, list | tuple) else (int(value),)
    return ()


# ----------------------------------------------------------------------------- draft checkpoint


@dataclass
class DraftFiles:
    path: str
    config: DraftConfig
    tensors: dict[str, torch.Tensor]  # under our names (backend.drafts.layouts)
    weights_file: str
    renamed: list[str] = field(default_factory=list)  # notes on names normalised from other layouts
    original_names: dict[str, str] = field(default_factory=dict)  # our name -> the file's name

    def file_name(self, name: str) -> str:
        return file_name(name, self.original_names)


def read_draft_tensors(draft_dir: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Every tensor of a draft: one file, or the shards an index file lists (docs/reference.md §1)."""
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (draft_dir / single).is_file():
            return _read_weights_file(draft_dir / single), single
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (draft_dir / index).is_file():
            return _read_sharded(draft_dir, index), index
    raise BadInput(
        f"{draft_dir}: no model.safetensors, pytorch_model.bin or their sharded index "
        "(model.safetensors.index.json / pytorch_model.bin.index.json)"
    )


def _read_weights_file(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        check_safetensors(path)  # header, shapes and byte ranges before anything is allocated
        try:
            return load_file(str(path))
        except Exception as error:  # noqa: BLE001 - safetensors' own errors: a corrupt file
            raise BadInput(f"{path}: corrupt safetensors file ({first_line(error)})") from None
    try:
        # A .bin is a pickle: only tensors and plain containers may come out of it. torch warns (two
        # lines on stderr) before the refusal it raises; the refusal below is the one line a user reads.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as error:
        # torch's message is a page of advice with terminal colours; the one fact a user needs is which
        # object the file holds ("Unsupported global: GLOBAL module.Class")
        found = re.search(r"GLOBAL ([\w.]+)", str(error))
        what = f"a {found.group(1)} object" if found else "Python objects"
        raise BadInput(
            f"{path} holds {what} beyond tensors; refusing to unpickle it (only weights are loaded, "
            "torch.load weights_only=True): re-save its state dict as tensors, or as model.safetensors"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BadInput(f"{path.name} is not a flat dict of tensors")
    return state


def _read_sharded(draft_dir: Path, index_name: str) -> dict[str, torch.Tensor]:
    """The shards of an index file's weight_map; every listed tensor must be in the shard it names."""
    try:
        weight_map = json.loads((draft_dir / index_name).read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise BadInput(f"{draft_dir / index_name}: not an index file with a weight_map ({error})") from error
    if not isinstance(weight_map, dict) or not weight_map:
        raise BadInput(f"{draft_dir / index_name}: the weight_map is empty")
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        path = draft_dir / str(shard)
        if Path(str(shard)).name != str(shard) or not path.is_file():
            raise BadInput(f"{draft_dir / index_name}: shard {shard!r} is not a file in {draft_dir}")
        loaded = _read_weights_file(path)
        listed = {name for name, where in weight_map.items() if where == shard}
        missing = sorted(listed - set(loaded))
        if missing:
            raise BadInput(f"{path.name}: lacks tensors its index lists: {', '.join(missing[:5])}")
        tensors.update({name: loaded[name] for name in listed})
    return tensors


def read_draft(draft_dir: str | Path) -> DraftFiles:
    draft_dir = Path(draft_dir)
    if not draft_dir.is_dir():
        raise BadInput(f"draft {draft_dir}: no such directory")
    config = read_draft_config(draft_dir).check_buildable()  # transformers' own checks, before tensors
    tensors, weights_file = read_draft_tensors(draft_dir)
    tensors, notes, original = to_internal_names(tensors)
    return DraftFiles(str(draft_dir), config, tensors, weights_file, notes, original)


def build_draft(files: DraftFiles, target: Target) -> Eagle3Draft:
    """The draft module with the checkpoint's weights, on the target's device and dtype. Call only
    for files that passed preflight."""
    draft = Eagle3Draft(files.config, target.model.get_input_embeddings())
    tensors = dict(files.tensors)
    if "own_embedding.weight" in tensors:  # kept: the reading decides whether a step uses it
        draft.own_embedding = torch.nn.Embedding(*tensors["own_embedding.weight"].shape)
    tensors.pop("t2d", None)
    draft.has_vocab_mapping = "d2t" in tensors
    tensors = {n: t for n, t in tensors.items() if not n.endswith(IGNORABLE_SUFFIXES)}
    result = draft.load_state_dict(tensors, strict=False)
    left_out = set(result.missing_keys) - {"d2t"}
    if left_out or result.unexpected_keys:  # preflight should have caught these; never run half-loaded
        raise BadInput(f"draft {files.path}: missing {sorted(left_out)}, unexpected {result.unexpected_keys}")
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    draft.path = files.path  # where it was read from (a result names the draft by it)
    draft.own_embedding_differs = own_embedding_differs(draft, target)
    view = read_as(
        "auto", files.config, target.num_layers, draft.own_embedding is not None, draft.own_embedding_differs
    )
    draft.default_math = view.math  # the training reading, for callers that name no engine
    return draft


def own_embedding_differs(draft: Eagle3Draft, target: Target) -> bool | None:
    """Whether the checkpoint's embed_tokens differs from the target's (None: it carries none)."""
    if draft.own_embedding is None:
        return None
    own, theirs = draft.own_embedding.weight, target.model.get_input_embeddings().weight
    return own.shape != theirs.shape or not torch.equal(own, theirs.to(own.dtype))
