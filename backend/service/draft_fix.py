"""A copy of a draft with the serving fix written into its config.json (reading_fixes.wiring_fix): the
weights and every other file copied unchanged, so that the fixed draft can be served and checked
(`serve-check --engine vllm --launch --draft OUT`) before the original is touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from backend import BadInput


def write_fixed_draft(draft_dir: str | Path, out: str | Path, config_update: dict) -> Path:
    source, target = Path(draft_dir), Path(out)
    if target.resolve() == source.resolve():
        raise BadInput(f"{out}: the fixed copy must go to another directory than the draft")
    if target.exists() and any(target.iterdir()):
        raise BadInput(f"{out}: exists and is not empty (the fixed copy goes to a new directory)")
    try:
        config = json.loads((source / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise BadInput(f"{source / 'config.json'}: cannot read it ({error})") from None
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for item in source.iterdir():
        if item.is_file() and item.name != "config.json":
            shutil.copy2(item, partial / item.name)
    for key, value in config_update.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if target.exists():
        target.rmdir()
    partial.rename(target)
    return target
