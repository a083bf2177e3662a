"""Dataset import: every format, malformed files of every kind, and a database that stays consistent."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
import torch

from backend import BadInput
from backend.importer import detect_format, import_dataset, read_dataset
from backend.synthetic import character_tokenizer
from db import store

VOCAB = 128
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }};{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture(scope="module")
def tokenizer():
    tok = character_tokenizer(VOCAB)
    tok.chat_template = TEMPLATE
    return tok


@pytest.fixture()
def factory(tmp_path):
    return store.session_factory(store.make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}"))


def good_record(n=6, prompt=2, source="a"):
    return {"input_ids": list(range(1, n + 1)), "loss_mask": [0] * prompt + [1] * (n - prompt), "seq_len": n,
            "n_prompt_tokens": prompt, "n_response_tokens": n - prompt, "source": source}


def write_lines(path, lines):
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines))
    return path


def test_jsonl_keeps_good_records_and_reports_each_bad_one(tmp_path, factory):
    bad = {
        2: b"{not json",
        3: b"[1, 2, 3]",
        4: json.dumps({"input_ids": [1, 2]}).encode(),
        5: json.dumps({**good_record(), "loss_mask": [0, 1]}).encode(),
        6: json.dumps({**good_record(), "input_ids": [1, 2, 3, 4, 5, VOCAB + 5]}).encode(),
        7: json.dumps({**good_record(), "seq_len": 99}).encode(),
        8: json.dumps({**good_record(), "n_prompt_tokens": 0}).encode(),
        9: json.dumps({**good_record(), "input_ids": [1, 2, "3", 4, 5, 6]}).encode(),
        10: b"\xff\xfe garbage",
        11: json.dumps({**good_record(), "loss_mask": [0, 0, 2, 1, 1, 1]}).encode(),
        12: json.dumps({**good_record(), "n_response_tokens": 1}).encode(),
        13: json.dumps({**good_record(), "input_ids": []}).encode(),
    }
    lines = [json.dumps(good_record()).encode()] + [bad[n] for n in range(2, 14)] + [
        json.dumps(good_record(source="b")).encode()]
    path = write_lines(tmp_path / "mixed.jsonl", lines)
    dataset_id, result = import_dataset(factory, path, vocab_size=VOCAB)
    assert [s.line for s in result.samples] == [1, 14]
    assert [r.line for r in result.rejected] == list(range(2, 14))
    reasons = {r.line: r.reason for r in result.rejected}
    assert "invalid JSON" in reasons[2] and "not a JSON object" in reasons[3] and "missing field" in reasons[4]
    assert "outside the vocabulary" in reasons[6] and "seq_len" in reasons[7] and "UTF-8" in reasons[10]
    with store.session_scope(factory) as session:
        (dataset,) = store.list_datasets(session)
        assert (dataset.id, dataset.sample_count, dataset.format) == (dataset_id, 2, "jsonl")
        samples = store.get_samples(session, dataset_id)
    assert [s.source for s in samples] == ["a", "b"] and samples[0].prompt_ids == [1, 2]
    assert samples[0].loss_coverage == pytest.approx(4 / 6)


def test_file_without_good_records_stores_nothing(tmp_path, factory):
    path = write_lines(tmp_path / "bad.jsonl", [b"{", b"[]"])
    with pytest.raises(BadInput, match="no valid record"):
        import_dataset(factory, path, vocab_size=VOCAB)
    empty = write_lines(tmp_path / "empty.jsonl", [b""])
    with pytest.raises(BadInput, match="empty file"):
        import_dataset(factory, empty)
    with store.session_scope(factory) as session:
        assert store.list_datasets(session) == []
    with pytest.raises(BadInput, match="no such file"):
        import_dataset(factory, tmp_path / "missing.jsonl")


def test_sharegpt_rendered_with_the_chat_template(tmp_path, tokenizer):
    conversations = [
        {"id": "c1", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"},
                                       {"from": "human", "value": "ok?"}, {"from": "gpt", "value": "sure"}]},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}]},
        {"conversations": [{"from": "gpt", "value": "first"}]},
        {"conversations": [{"from": "robot", "value": "x"}]},
        {"conversations": [{"from": "human", "value": 5}]},
        {"conversations": []},
        "just a string",
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(conversations))
    assert detect_format(path) == "sharegpt"
    result = read_dataset(path, tokenizer, VOCAB)
    assert [r.line for r in result.rejected] == [3, 4, 5, 6, 7]
    first, second = result.samples
    text = tokenizer.decode(first.input_ids)
    assert text == "<user>hi;<assistant>yo;<user>ok?;<assistant>sure;"
    masked = tokenizer.decode([t for t, m in zip(first.input_ids, first.loss_mask, strict=True) if m])
    assert masked == "yo;sure;"  # assistant turns only
    assert tokenizer.decode(first.prompt_ids) == "<user>hi;<assistant>"
    assert sum(second.loss_mask) == 0 and tokenizer.decode(second.prompt_ids).endswith("<assistant>")


def test_sharegpt_needs_a_chat_template_and_valid_json(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}]}]))
    with pytest.raises(BadInput, match="chat template"):
        read_dataset(path, character_tokenizer(VOCAB), VOCAB)
    path.write_text('[{"conversations": ')
    tok = character_tokenizer(VOCAB)
    tok.chat_template = TEMPLATE
    with pytest.raises(BadInput, match="invalid JSON"):
        read_dataset(path, tok, VOCAB)


class NotATensor:
    pass


def test_specforge_feature_files(tmp_path):
    folder = tmp_path / "features"
    folder.mkdir()
    ids = torch.arange(1, 9)
    good = {"input_ids": ids, "loss_mask": torch.tensor([0, 0, 0, 1, 1, 1, 1, 1]),
            "hidden_state": torch.randn(1, 8, 16), "aux_hidden_state": torch.randn(1, 8, 48)}
    torch.save(good, folder / "data_0.ckpt")
    torch.save({**good, "aux_hidden_state": torch.randn(1, 7, 48)}, folder / "data_1.ckpt")
    torch.save({"input_ids": ids}, folder / "data_2.ckpt")
    with open(folder / "data_3.ckpt", "wb") as handle:
        pickle.dump({"input_ids": NotATensor()}, handle)
    (folder / "data_4.ckpt").write_bytes(b"garbage")
    torch.save([1, 2], folder / "data_5.ckpt")
    torch.save({**good, "input_ids": ids + VOCAB}, folder / "data_6.ckpt")
    result = read_dataset(folder, vocab_size=VOCAB)
    assert result.format == "specforge"
    (sample,) = result.samples
    assert sample.prompt_len == 3 and sample.extra["feature_file"].endswith("data_0.ckpt")
    reasons = {r.line: r.reason for r in result.rejected}
    assert set(reasons) == {2, 3, 4, 5, 6, 7}
    assert "does not match" in reasons[2] and "lacks aux_hidden_state" in reasons[3]
    assert "tensor-only" in reasons[4] and "tensor-only" in reasons[5]
    assert "expected a dict" in reasons[6] and "vocabulary" in reasons[7]


def test_plain_text_prompts(tmp_path, tokenizer):
    path = tmp_path / "prompts.txt"
    path.write_text("def f(x):\\n    return\n\n  \nhello\n")
    result = read_dataset(path, tokenizer, VOCAB)
    assert [s.line for s in result.samples] == [1, 4]
    assert result.samples[0].extra["text"] == "def f(x):\n    return"  # the escape became a newline
    assert tokenizer.decode(result.samples[1].input_ids) == "hello"
    assert all(sum(s.loss_mask) == 0 and s.prompt_len == len(s.input_ids) for s in result.samples)
    path.write_bytes(b"\xff\xfe\n")
    with pytest.raises(BadInput, match="UTF-8"):
        read_dataset(path, tokenizer, VOCAB)


def test_cli_import_contract(tmp_path):
    path = write_lines(tmp_path / "mixed.jsonl", [json.dumps(good_record()).encode(), b"{oops"])
    url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    done = subprocess.run([sys.executable, "-m", "backend", "import", "--samples", str(path), "--name", "mine",
                           "--target", str(tmp_path / "none"), "--db", url, "--json"],
                          capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    assert out["imported"] == 1 and out["rejected"][0]["line"] == 2 and "invalid JSON" in out["rejected"][0]["reason"]
    with store.session_scope(store.session_factory(store.make_engine(url))) as session:
        names = [d.name for d in store.list_datasets(session)]
    assert names[-1] == "mine" and out["dataset_id"] == len(names)
    bad = write_lines(tmp_path / "bad.jsonl", [b"{oops"])
    failed = subprocess.run([sys.executable, "-m", "backend", "import", "--samples", str(bad), "--db", url],
                            capture_output=True, text=True)
    assert failed.returncode == 2 and "no valid record" in failed.stderr
