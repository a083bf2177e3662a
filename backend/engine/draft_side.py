"""The target as a draft needs it where the target itself does not run here (a replay over traces):
its config, tokenizer and end-of-generation ids, and its input embeddings, read alone from its weights
files (the draft embeds its tokens with them), and its LM head when a draft asks for it (a DFlash draft
proposes through the target's own head). The target's forward is a `TraceRunner`."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from backend import BadInput, first_line
from backend.engine.loading import Target, pick_device, pick_dtype, read_target_config, target_of


class EmbeddingsOnly(torch.nn.Module):
    """Stands for the target model where only its embeddings and config are read; the LM head is read
    from the weights files the first time a draft asks for it (`head`: a callable giving its weight)."""

    def __init__(self, embedding: torch.nn.Embedding, config, generation_config=None, head=None):
        super().__init__()
        self.embed_tokens, self.config, self.generation_config = embedding, config, generation_config
        self._head, self._read_head = None, head

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed_tokens

    def get_output_embeddings(self) -> torch.nn.Linear:
        if self._head is None:
            weight = self._read_head()
            head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
            head.weight = torch.nn.Parameter(weight, requires_grad=False)
            self._head = head
        return self._head


def weight_names(path: str | Path) -> tuple[str, str]:
    """The weights' names of the target's input embedding table and of its LM head (the same name when
    the two are tied), from its architecture built on the meta device (no weights read)."""
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    wanted, head = model.get_input_embeddings(), model.get_output_embeddings()
    names = {id(module): f"{name}.weight" for name, module in model.named_modules()}
    if id(wanted) not in names:
        raise BadInput(f"target {path}: cannot find its input embeddings")
    tied = head is None or head.weight is wanted.weight or getattr(config, "tie_word_embeddings", False)
    return names[id(wanted)], names[id(wanted)] if tied else names.get(id(head), "lm_head.weight")


def read_weight(path: str | Path, name: str) -> torch.Tensor:
    """One tensor of the target, read alone from its safetensors files."""
    from safetensors import safe_open

    folder = Path(path)
    files = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shard = json.loads(index.read_text()).get("weight_map", {}).get(name)
        files = [folder / shard] if shard else files
    for file in files:
        with safe_open(str(file), framework="pt") as opened:
            if name in opened.keys():
                return opened.get_tensor(name)
    raise BadInput(f"target {path}: no safetensors file holds {name}")


def draft_side_target(path: str, runner, device: str | None = None, dtype: str | None = None) -> Target:
    """A Target whose forward is `runner` (a TraceRunner) and whose model holds only the embeddings."""
    config = read_target_config(path)
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(torch_device, dtype)
    try:
        names = weight_names(path)
        table = read_weight(path, names[0])
    except (OSError, ValueError, KeyError) as error:
        raise BadInput(f"target {path}: cannot read its embeddings ({first_line(error)})") from None
    embedding = torch.nn.Embedding.from_pretrained(table.to(torch_dtype), freeze=True).to(torch_device)

    def head() -> torch.Tensor:
        if names[1] == names[0]:
            return embedding.weight
        try:
            return read_weight(path, names[1]).to(torch_device, torch_dtype)
        except (OSError, ValueError, KeyError) as error:
            raise BadInput(f"target {path}: cannot read its LM head ({first_line(error)})") from None

    model = EmbeddingsOnly(embedding, config, generation_config(path), head).eval()
    return target_of(model, path, config, torch_device, torch_dtype, runner)


def generation_config(path: str | Path):
    """The target's generation_config.json as transformers reads it (its end-of-generation ids win over
    the config's, as for a loaded model: loading.eos_ids); None without one."""
    try:
        return GenerationConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return None
