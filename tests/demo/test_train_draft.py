"""The demo's draft training (demo/train_draft.py): a run stopped after an epoch resumes from its
checkpoint to the same weights as a run never stopped; early stopping ends it; the vocabulary ranking
and the head taken from the target."""

from __future__ import annotations

import random


def _setup(tmp_path):
    from demo import make_data, train_draft
    from tests.support.synthetic import TargetShape, draft_config_dict, make_target

    target = make_target(
        tmp_path / "target", TargetShape(num_layers=4, hidden=32, vocab=96, heads=2, kv_heads=1)
    )
    rng = random.Random(0)
    records = []
    for _ in range(6):
        ids = [rng.randrange(96) for _ in range(20)]
        records.append({"input_ids": ids, "loss_mask": [0] * 6 + [1] * 14})
    features = make_data.target_features(target, records, [1, 2, 3], log=lambda *_: None)
    for sample in features:
        sample["argmax"] = (sample["final"] @ target.lm_head.weight.T).argmax(-1)
    used = sorted(train_draft.ranked_vocabulary(records, 96)[:48])
    config = draft_config_dict(target.config, 48, "specforge", aux_ids=[0, 1, 2], intermediate_size=64)
    return target, records, features, used, config


def _train(target, features, used, config, epochs, checkpoint=None, stop_at=None):
    from demo import train_draft

    draft = train_draft.new_draft(config, target, used, seed=5, head_from_target=True)
    seen = []

    def on_epoch(epoch, _draft):
        seen.append(epoch)
        return epoch == stop_at

    schedule = train_draft.DraftSchedule(epochs, 2, 7, 64, 2e-3, checkpoint)
    train_draft.train_draft(draft, target, used, features, [0, 1, 2], schedule, on_epoch, log=lambda *_: None)
    return draft, seen


def test_a_stopped_run_resumes_to_the_weights_of_an_unstopped_one(tmp_path):
    import torch

    from demo import train_draft

    target, _, features, used, config = _setup(tmp_path)
    whole, seen = _train(target, features, used, config, 3)
    assert seen == [1, 2, 3]
    checkpoint = tmp_path / "run.pt"
    _train(target, features, used, config, 3, checkpoint)  # writes the checkpoint after every epoch
    state = torch.load(checkpoint, weights_only=True)
    assert state["epoch"] == 3 and not state["stopped"]
    checkpoint.unlink()
    first = tmp_path / "first.pt"

    class Stop(Exception):
        pass

    def crash_after_one(epoch, _draft):
        if epoch == 2:
            raise Stop  # the process dies in epoch 2's evaluation: epoch 1 is on disk
        return False

    draft = train_draft.new_draft(config, target, used, seed=5, head_from_target=True)
    schedule = train_draft.DraftSchedule(3, 2, 7, 64, 2e-3, first)
    try:
        train_draft.train_draft(
            draft, target, used, features, [0, 1, 2], schedule, crash_after_one, log=lambda *_: None
        )
    except Stop:
        pass
    assert torch.load(first, weights_only=True)["epoch"] == 1
    resumed, seen = _train(target, features, used, config, 3, first)
    assert seen == [2, 3]
    for name, tensor in whole.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name


def test_early_stopping_ends_the_run_and_a_resume_keeps_it_ended(tmp_path):
    target, _, features, used, config = _setup(tmp_path)
    checkpoint = tmp_path / "run.pt"
    _, seen = _train(target, features, used, config, 4, checkpoint, stop_at=2)
    assert seen == [1, 2]
    _, again = _train(target, features, used, config, 4, checkpoint)
    assert again == []  # the checkpoint says stopped: nothing more is trained


def test_the_head_starts_as_the_targets_rows_and_the_embedding_is_not_trained(tmp_path):
    import torch

    from demo import train_draft

    target, _, _, used, config = _setup(tmp_path)
    draft = train_draft.new_draft(config, target, used, seed=5, head_from_target=True)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight[torch.tensor(used)])
    assert torch.equal(draft.norm.weight, target.model.norm.weight)
    assert all(p is not target.get_input_embeddings().weight for p in draft.parameters())


def test_the_vocabulary_ranks_answers_then_prompts_then_low_ids():
    from demo import train_draft
    from demo.build_chat import vocabulary_size

    records = [{"input_ids": [9, 9, 7, 5, 5, 5], "loss_mask": [0, 0, 0, 1, 1, 1]}]
    ranked = train_draft.ranked_vocabulary(records, 12)
    assert ranked[:3] == [5, 9, 7] and sorted(ranked) == list(range(12))
    assert vocabulary_size(ranked, [5, 5, 9, 0], 0.75, 10) == 2  # 5 and 9 cover 3 of 4
    assert vocabulary_size(ranked, [5, 5, 9, 0], 1.0, 10) == 4  # 0 is the first fill id, rank 4
    assert vocabulary_size(ranked, [11], 1.0, 6) == 6  # capped


def test_the_answers_cache_is_seeded_from_an_earlier_train_file(tmp_path):
    from demo.build_chat import seed_cache

    prompts = [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]
    earlier = [
        {"prompt": "a", "input_ids": [1, 2, 3], "n_prompt_tokens": 2},
        {"prompt": "b", "input_ids": [4, 5], "n_prompt_tokens": 1},
    ]
    cache = tmp_path / "answers.jsonl"
    assert seed_cache(cache, prompts, earlier) == 2
    lines = cache.read_text().splitlines()
    assert '"answer_ids": [3]' in lines[0] and '"index": 1' in lines[1]
    assert seed_cache(cache, prompts, earlier) == 0  # an existing cache is kept as it is
