"""Broken checkpoints are refused with one line naming the file, before any tensor is allocated:
truncated files, headers claiming huge tensors, configs that are not UTF-8 or have bad sizes."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from backend import BadInput


@pytest.fixture()
def draft_copy(pairs, tmp_path):
    pair = pairs["random-L2"]
    folder = tmp_path / "draft"
    shutil.copytree(pair.draft_dir, folder)
    return pair, folder


def _header(path):
    raw = path.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def _write(path, header, data):
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def _refusal(pair, folder) -> str:
    from backend.engine.preflight import load_checked_draft

    with pytest.raises(BadInput) as caught:
        load_checked_draft(folder, pair.target)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_truncated_safetensors_file(draft_copy):
    pair, folder = draft_copy
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    assert "model.safetensors" in _refusal(pair, folder) and "outside the file" in _refusal(pair, folder)


def test_a_header_claiming_an_8_gib_tensor_allocates_nothing(draft_copy):
    pair, folder = draft_copy
    weights = folder / "model.safetensors"
    header, data = _header(weights)
    name = next(k for k in header if k != "__metadata__")
    header[name] = {"dtype": "F32", "shape": [2**31], "data_offsets": [0, 2**33]}
    _write(weights, header, data)
    assert "outside the file" in _refusal(pair, folder)


def test_a_shape_that_does_not_match_its_bytes(draft_copy):
    pair, folder = draft_copy
    weights = folder / "model.safetensors"
    header, data = _header(weights)
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [header[name]["shape"][0] + 1, *header[name]["shape"][1:]]
    _write(weights, header, data)
    assert "needs" in _refusal(pair, folder)


def test_garbage_instead_of_a_header(draft_copy):
    pair, folder = draft_copy
    (folder / "model.safetensors").write_bytes(b"\xff" * 7)
    assert "truncated" in _refusal(pair, folder)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda c: c.update(hidden_size="abc"), "hidden_size"),
        (lambda c: c.update(draft_vocab_size=-1), "draft_vocab_size"),
        (lambda c: c.update(vocab_size=-1), "vocab_size"),
    ],
)
def test_bad_sizes_in_the_draft_config(draft_copy, change, reason):
    pair, folder = draft_copy
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    assert reason in _refusal(pair, folder)


def test_a_config_that_is_not_utf8(draft_copy):
    pair, folder = draft_copy
    (folder / "config.json").write_bytes(b'{"hidden_size": "\xff\xfe"}')
    assert "not UTF-8" in _refusal(pair, folder)


@pytest.mark.parametrize(
    "config_bytes, reason",
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"model_type": "llama", "vocab_size": -1}', "vocab_size must be a positive integer"),
        (b'{"model_type": "llama", "hidden_size": "abc"}', "hidden_size must be a positive integer"),
        (b'{"model_type": "no-such-architecture"}', "transformers cannot read it"),
        (b"[1, 2]", "expected a JSON object"),
    ],
)
def test_a_broken_target_config(pairs, tmp_path, config_bytes, reason):
    from backend.engine.loading import load_target

    folder = tmp_path / "target"
    shutil.copytree(pairs["random-L2"].target_dir, folder)
    (folder / "config.json").write_bytes(config_bytes)
    with pytest.raises(BadInput, match=reason) as caught:
        load_target(folder)
    assert "config.json" in str(caught.value) and "\n" not in str(caught.value)


def test_a_truncated_target_weights_file(pairs, tmp_path):
    from backend.engine.loading import load_target

    folder = tmp_path / "target"
    shutil.copytree(pairs["random-L2"].target_dir, folder)
    weights = next(folder.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(BadInput, match="safetensors"):
        load_target(folder)
