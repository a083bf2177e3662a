"""Targets split across devices: accelerate's big-model dispatch (`device_map`, `max_memory`) as
transformers' `from_pretrained` exposes it, for targets that do not fit one GPU.

A dispatched model runs each module where the map puts it; accelerate's hooks move activations
between devices and load offloaded ("disk" or "cpu" offload) weights just in time. SpecLens feeds it
inputs on its execution device (where the embedding runs), collects the captured aux states and the
logits there, and runs the draft there.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

import torch

from backend import BadInput

NAMED_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def parse_device_map(text: str | None):
    """None; one of accelerate's strategies ('auto', 'balanced', ...); or a JSON object (inline or a
    file path) mapping module names to devices (0, 'cuda:1', 'cpu', 'disk')."""
    if not text:
        return None
    text = text.strip()
    if text in NAMED_MAPS:
        return text
    source = text
    if not text.startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise BadInput(
                f"--device-map {text}: not one of {', '.join(NAMED_MAPS)}, a JSON object, or a JSON file"
            )
        source = path.read_text()
    try:
        mapping = json.loads(source)
    except ValueError as error:
        raise BadInput(f"--device-map {text}: not valid JSON ({error})") from None
    if not isinstance(mapping, dict) or not mapping:
        raise BadInput(f"--device-map {text}: expected a JSON object of module name -> device")
    for name, device in mapping.items():
        if not (isinstance(device, int) and device >= 0) and not (
            isinstance(device, str)
            and (device in ("cpu", "disk", "meta") or device.startswith(("cuda", "mps", "xpu")))
        ):
            raise BadInput(
                f"--device-map: module {name!r} has device {device!r} (want a GPU index, cpu or disk)"
            )
    return mapping


def parse_max_memory(text: str | None) -> dict | None:
    """'0=20GiB,1=20GiB,cpu=64GiB' -> {0: '20GiB', 1: '20GiB', 'cpu': '64GiB'}."""
    if not text:
        return None
    limits = {}
    for part in text.split(","):
        device, _, amount = part.strip().partition("=")
        if not device or not amount:
            raise BadInput(f"--max-memory {text}: write DEVICE=AMOUNT pairs, e.g. 0=20GiB,cpu=64GiB")
        limits[int(device) if device.isdigit() else device] = amount
    return limits


def dispatch_kwargs(device_map: str | None, max_memory: str | None) -> dict:
    """from_pretrained keyword arguments for a dispatched load (empty: load on one device)."""
    mapping = parse_device_map(device_map)
    limits = parse_max_memory(max_memory)
    if mapping is None:
        if limits is not None:
            raise BadInput("--max-memory needs --device-map (e.g. --device-map auto)")
        return {}
    kwargs = {"device_map": mapping, "offload_folder": _offload_folder()}
    if limits is not None:
        kwargs["max_memory"] = limits
    return kwargs


def _offload_folder() -> str:
    folder = tempfile.mkdtemp(prefix="speclens-offload-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def execution_device(model, fallback: torch.device) -> torch.device:
    """Where a dispatched model's forward starts (its embedding's device: inputs go there); the
    fallback for a model loaded on one device. Offloaded modules run on the CPU."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return fallback
    embedding = next((d for name, d in device_map.items() if name.endswith("embed_tokens")), None)
    first = embedding if embedding is not None else next(iter(device_map.values()))
    if isinstance(first, int):
        return torch.device("cuda", first)
    return torch.device("cpu" if first in ("disk", "meta") else first)


def placement(model) -> dict | None:
    """Devices in use and how many modules each holds (None for an undispatched model)."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return None
    counts: dict[str, int] = {}
    for device in device_map.values():
        counts[str(device)] = counts.get(str(device), 0) + 1
    return counts
