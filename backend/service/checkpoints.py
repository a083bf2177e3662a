"""Target and draft directories the user added in the dashboard, kept in the database beside the
datasets so that a reload (or a colleague on the same PostgreSQL store) finds them again."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from backend import BadInput
from backend.service.database import open_database
from db import store

ROLES = ("target", "draft")


def remember(db_url: str | None, role: str, path: str) -> str:
    """Store a directory whose config.json reads (a draft's as an EAGLE-3 draft config); returns the
    name it is listed under. BadInput when the directory or its config.json is missing (said apart, so
    the user knows which) or the config does not read: an unreadable directory never becomes anyone's
    default."""
    if role not in ROLES:
        raise BadInput(f"unknown checkpoint role {role!r}; use one of {', '.join(ROLES)}")
    said = problem(path, role)
    if said:
        raise BadInput(said)
    directory = Path(path).expanduser()
    name = directory.name or str(directory)
    with store.session_scope(open_database(db_url).factory) as session:
        store.remember_checkpoint(session, role, str(directory), name)
    return name


def problem(path: str, role: str) -> str | None:
    """Why `path` is not a usable `role` directory, in one line naming it (missing, a file, no
    config.json, a config.json that does not read as `role`'s); None when it is usable."""
    directory = Path(path).expanduser()
    try:
        if directory.is_file():
            return f"{path}: a file, not a model directory (give the folder that holds config.json)"
        if not directory.is_dir():
            return f"{path}: no such directory"
        if not (directory / "config.json").is_file():
            return f"{path}: the directory has no config.json (not a model or draft checkpoint)"
    except OSError as error:  # a path too long, a folder we may not enter
        return f"{path}: cannot be read ({error.strerror or error})"
    try:
        readable(directory, role, strict=True)
    except BadInput as error:
        return str(error)
    return None


def readable(directory, role: str, strict: bool = False) -> bool:
    """Whether `directory`'s config.json reads as `role`'s (a draft: an EAGLE-3 draft config; a target:
    a JSON object); with `strict`, a BadInput naming the file and the reason instead of False."""
    from backend.drafts.draft_config import read_draft_config
    from backend.drafts.json_config import read_json_object

    try:
        if role == "draft":
            read_draft_config(directory)
        else:
            read_json_object(Path(directory) / "config.json")
    except (BadInput, OSError) as error:
        if strict:
            raise BadInput(str(error)) from None
        return False
    return True


def remembered(db_url: str | None, role: str) -> list[tuple[str, str]]:
    """(name, path) of the directories added for `role`, the latest added last. Two drafts may share a
    name (two runs' `final`): the pages tell them apart by their parent folder."""
    with store.session_scope(open_database(db_url).factory) as session:
        return store.remembered_checkpoints(session, role)


def _resolved(path: str) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except (OSError, RuntimeError):
        return str(path)


def _stamp(path: str) -> float:
    try:
        return Path(path, "config.json").stat().st_mtime
    except OSError:
        return -1.0


@lru_cache(maxsize=256)
def _fits(draft: str, target: str, _draft_stamp: float, _target_stamp: float) -> bool:
    """Both config.json files read as plain JSON (the dashboard's server imports no torch)."""
    from backend.drafts.draft_config import read_draft_config
    from backend.drafts.json_config import config_sizes, read_json_object

    file = Path(target, "config.json")
    try:
        config = read_draft_config(draft)
        sizes = config_sizes(read_json_object(file), file, ("hidden_size", "vocab_size"))
    except (BadInput, OSError, ValueError):
        return False
    return config.target_hidden_size == sizes["hidden_size"] and config.vocab_size == sizes["vocab_size"]


def fits(draft_path: str, target_path: str) -> bool:
    """The draft is made for this target: the hidden size it reads and its vocabulary are the target's
    (read from both config.json files; an unreadable one does not fit)."""
    return _fits(_resolved(draft_path), _resolved(target_path), _stamp(draft_path), _stamp(target_path))


def drafts_for(target_path: str, candidates: list[str], keep: str | None = None) -> dict[str, str]:
    """The drafts to offer beside this target, by unambiguous name: the target's bundled drafts (plain
    names: final, epoch1, miswired), then `candidates` (configured, remembered, added) that fit it,
    each directory once however its path is spelled; `keep` (the active draft) is listed even when it
    does not fit, so the choice on screen is the one in use. A candidate whose folder name is taken is
    named by as many trailing path parts as tell it apart (`run2/final`)."""
    from backend.defaults import pair_of

    pair = pair_of(target_path)
    bundled = pair.draft_dirs() if pair else {}
    seen = {_resolved(p) for p in bundled.values()}
    others: list[str] = []
    for path in candidates + ([keep] if keep else []):
        if not path or _resolved(path) in seen or not Path(path, "config.json").is_file():
            continue
        if path == keep or fits(path, target_path):
            seen.add(_resolved(path))
            others.append(path)
    names = dict(bundled)
    for path in others:
        parts = Path(_resolved(path)).parts
        label = next(
            (
                "/".join(parts[-k:])
                for k in range(1, len(parts) + 1)
                if "/".join(parts[-k:]) not in names
                and all(
                    "/".join(Path(_resolved(o)).parts[-k:]) != "/".join(parts[-k:])
                    for o in others
                    if o != path
                )
            ),
            _resolved(path),
        )
        names[label] = path
    return names


def is_dflash_draft(draft_path: str) -> bool:
    """Whether the folder holds a DFlash drafter (its config.json's method); False for one that cannot
    be read now (the job that loads it says why)."""
    from backend.drafts.dflash_config import is_dflash

    try:
        return is_dflash(draft_path)
    except BadInput:
        return False


def has_chat_template(target_path: str) -> bool:
    """Whether the target directory's tokenizer carries a chat template, read from its files as
    transformers finds it (chat_template.jinja, chat_template.json, or tokenizer_config.json's
    `chat_template`); no tokenizer or model is loaded."""
    import json
    from pathlib import Path

    folder = Path(target_path)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def checked_override(target_path: str, ids):
    """A typed wiring override (`--aux-hf-indices`, Decode's field) as the Wiring it feeds, checked
    against the target's depth read from its config.json (torch-free): the override's one check,
    made before any weights load (a bad one is refused in a second, not after the load; Decode says it
    under Start). None: no override."""
    if ids is None:
        return None
    from backend.drafts.json_config import config_sizes, read_json_object
    from backend.run.wiring import override_wiring

    file = Path(target_path) / "config.json"
    layers = config_sizes(read_json_object(file), file, ("num_hidden_layers",))["num_hidden_layers"]
    if layers is None:
        raise BadInput(f"{file}: no num_hidden_layers: cannot check a wiring override against it")
    return override_wiring(ids, layers)
