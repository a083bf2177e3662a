"""Every draft format's tensor names, read and write, in one place (docs/reference.md §1).

SpecLens's own names are those of `Eagle3Draft`: `layers.i.*` for decoder layers and
`own_embedding.weight` for an embedding the draft carries. Files spell them:
- SpecForge / SGLang and the original EAGLE releases: `midlayer.*` (one layer) or `midlayers.i.*`;
- vLLM speculators: `layers.i.*` (vLLM renames `midlayer.` to `layers.0.` on load);
- any of them may carry a `model.` prefix; the draft's own embedding is `embed_tokens.weight`.
"""

from __future__ import annotations

LAYOUTS = ("specforge", "eagle", "speculators")


def to_internal_names(tensors: dict) -> tuple[dict, list[str], dict[str, str]]:
    """File names -> ours. Returns (renamed tensors, notes on what was renamed, our name -> file name)."""
    renamed, notes, original = {}, set(), {}
    for name, tensor in tensors.items():
        new = name
        if new.startswith("model."):
            new = new[len("model.") :]
            notes.add("stripped a 'model.' prefix")
        if new.startswith("midlayer."):
            new = "layers.0." + new[len("midlayer.") :]
            notes.add("midlayer.* read as layers.0.* (SpecForge/EAGLE layout)")
        elif new.startswith("midlayers."):
            new = "layers." + new[len("midlayers.") :]
            notes.add("midlayers.i.* read as layers.i.*")
        elif new.startswith("embed_tokens."):
            new = "own_embedding." + new[len("embed_tokens.") :]
        renamed[new] = tensor
        original[new] = name
    return renamed, sorted(notes), original


def to_layout_name(name: str, layout: str) -> str:
    """Our name -> the layout's: `midlayer.*` for SpecForge and EAGLE, `embed_tokens.*` for an
    embedding the draft carries itself."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; use one of {LAYOUTS}")
    if name.startswith("own_embedding."):
        return "embed_tokens." + name[len("own_embedding.") :]
    if name.startswith("layers.0.") and layout != "speculators":
        return "midlayer." + name[len("layers.0.") :]
    return name


def to_layout_names(tensors: dict, layout: str) -> dict:
    return {to_layout_name(name, layout): tensor for name, tensor in tensors.items()}


def file_name(name: str, original_names: dict[str, str]) -> str:
    """One of our names as this checkpoint's layout spells it (messages match what the user sees),
    including names the file lacks."""
    if name in original_names:
        return original_names[name]
    if any(n.startswith("midlayer.") for n in original_names.values()):
        return to_layout_name(name, "specforge")
    return to_layout_name(name, "speculators")
