"""The target as a draft needs it where the target itself does not run here (a replay over traces):
its config, tokenizer and end-of-generation ids, and its input embeddings, read alone from its weights
files (the draft embeds its tokens with them). The target's forward is a `TraceRunner`."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from backend import BadInput, first_line
from backend.engine.loading import Target, pick_device, pick_dtype, read_target_config, target_of


class EmbeddingsOnly(torch.nn.Module):
    """Stands for the target model where only its embeddings and config are read."""

    def __init__(self, embedding: torch.nn.Embedding, config, generation_config=None):
        super().__init__()
        self.embed_tokens, self.config, self.generation_config = embedding, config, generation_config

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed_tokens


def embedding_name(path: str | Path) -> str:
    """The weights' name of the target's input embedding table, from its architecture built on the meta
    device (no weights read)."""
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    wanted = model.get_input_embeddings()
    for name, module in model.named_modules():
        if module is wanted:
            return f"{name}.weight"
    raise BadInput(f"target {path}: cannot find its input embeddings")


def read_embedding(path: str | Path) -> torch.Tensor:
    """The input embedding table, read alone from the target's safetensors files."""
    from safetensors import safe_open

    name, folder = embedding_name(path), Path(path)
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
        table = read_embedding(path)
    except (OSError, ValueError, KeyError) as error:
        raise BadInput(f"target {path}: cannot read its embeddings ({first_line(error)})") from None
    embedding = torch.nn.Embedding.from_pretrained(table.to(torch_dtype), freeze=True).to(torch_device)
    model = EmbeddingsOnly(embedding, config, generation_config(path)).eval()
    return target_of(model, path, config, torch_device, torch_dtype, runner)


def generation_config(path: str | Path):
    """The target's generation_config.json as transformers reads it (its end-of-generation ids win over
    the config's, as for a loaded model: loading.eos_ids); None without one."""
    try:
        return GenerationConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return None
