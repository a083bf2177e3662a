"""Hostile data files: each is refused or rejected line by line with a reason, never a traceback,
and a bad line never costs the good ones."""

from __future__ import annotations

import json
import os
import re

import pytest

from backend import BadInput

GOOD = {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1], "n_prompt_tokens": 2}


def test_a_byte_order_mark_does_not_cost_the_first_record(tmp_path):
    from backend.data.samples import read_jsonl

    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(GOOD) + "\n").encode() * 2)
    samples, rejected = read_jsonl(path)
    assert len(samples) == 2 and rejected == []


def test_deep_nesting_rejects_its_line_only(tmp_path):
    from backend.data.samples import read_jsonl

    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(GOOD) + "\n")
    samples, rejected = read_jsonl(path)
    assert [s.line for s in samples] == [1, 3]
    assert [(r.line, r.reason) for r in rejected] == [(2, "JSON nested too deeply")]


def test_a_sharegpt_speaker_that_is_a_list_rejects_that_conversation(tmp_path):
    from backend.data.importer import conversation_messages

    with pytest.raises(ValueError, match="unknown speaker"):
        conversation_messages({"conversations": [{"from": ["human"], "value": "hi"}]})


def test_only_regular_files_are_read(tmp_path):
    from backend.data.importer import read_dataset
    from backend.data.samples import read_jsonl

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for reader in (read_jsonl, read_dataset):
        with pytest.raises(BadInput, match="not a regular file"):
            reader(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        read_dataset("/dev/zero", format="jsonl")


def test_a_zip_bomb_feature_file_is_refused_before_unpacking(tmp_path):
    import zipfile

    from backend.data.features import load_feature_file

    path = tmp_path / "bomb.ckpt"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb/data/0", b"\0" * (100 * 1024 * 1024))  # 100 MB of zeros: ~100 KB packed
    assert path.stat().st_size < 1024 * 1024  # past MAX_UNPACK_RATIO and the 64 MB slack
    with pytest.raises(BadInput, match="unpacks to 100 MB"):
        load_feature_file(path)


def test_the_linear_conversation_rendering_equals_the_exact_one():
    from backend.data.conversations import _render_by_prefixes, render_conversation
    from backend.defaults import DEMO_TARGET
    from backend.engine.loading import load_tokenizer

    tokenizer = load_tokenizer(DEMO_TARGET)
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: x = {i} * 2\n"}
        for i in range(6)
    ]
    for messages in ([{"role": "system", "content": "be brief"}, *turns], turns[:2], turns[:5]):
        fast = render_conversation(tokenizer, messages, 1, "unit")
        exact = _render_by_prefixes(tokenizer, messages, 1, "unit")
        assert (fast.input_ids, fast.loss_mask, fast.prompt_len) == (
            exact.input_ids,
            exact.loss_mask,
            exact.prompt_len,
        )


def test_an_empty_feature_file_is_bad_input_with_a_reason(tmp_path):
    from backend.data.features import load_feature_file

    path = tmp_path / "empty.ckpt"
    path.write_bytes(b"")
    with pytest.raises(BadInput, match=r"empty.ckpt: not a torch.save file, or a cut one \(EOFError"):
        load_feature_file(path)


def test_a_chat_template_that_does_not_compile_is_one_bad_input(tmp_path):
    from transformers import AutoTokenizer

    from backend.data.importer import read_dataset
    from backend.defaults import DEMO_TARGET

    tokenizer = AutoTokenizer.from_pretrained(DEMO_TARGET, local_files_only=True)
    tokenizer.chat_template = "{% for %}"
    path = tmp_path / "chat.json"
    path.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "x"}]}])
    )
    with pytest.raises(BadInput, match="its chat template does not compile"):
        read_dataset(path, tokenizer, None, "sharegpt")
    tokenizer.chat_template = "{{ raise_exception('roles must alternate') }}"  # the template's own refusal
    result = read_dataset(path, tokenizer, None, "sharegpt")
    assert not result.samples and result.rejected[0].reason == "roles must alternate"


def test_a_feature_file_is_refused_in_words_never_with_torch_s_advice_to_unpickle(tmp_path):
    """torch's refusal text is a page that suggests weights_only=False; the user gets one line."""
    import torch

    from backend.data.features import load_feature_file

    evil = tmp_path / "evil.ckpt"
    torch.save({"input_ids": torch.zeros(3), "call": print}, evil)
    text = tmp_path / "notes.ckpt"
    text.write_text('{"not": "torch"}\n')
    folder = tmp_path / "features"
    folder.mkdir()
    for path, said in [
        (evil, "holds Python objects besides tensors, which SpecLens never unpickles"),
        (text, "not a torch.save file, or a cut one (UnpicklingError: Unsupported operand"),
        (folder, "a folder, not a feature file"),
    ]:
        with pytest.raises(BadInput, match=re.escape(said)) as refused:
            load_feature_file(path)
        assert "weights_only" not in str(refused.value) and "\n" not in str(refused.value)
