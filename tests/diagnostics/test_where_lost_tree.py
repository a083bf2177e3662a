"""Where lost for trees (per depth and sibling rank) and for sampled chains (drawn vs expected), issue 65
row 21: read off stored runs the replay made, each count held against the steps it counts."""

from __future__ import annotations


def _runs(pair, db_url, **shape):
    from backend.run.request import ReplayRequest
    from backend.service.jobs import run_replay

    prompts = [(5, 9, 2, 7), (11, 3, 8), (4, 4, 6, 1, 9)]
    return [
        run_replay(
            ReplayRequest(
                str(pair.target_dir), str(pair.draft_dir), prompt_ids=p, max_new_tokens=40, **shape
            ),
            db_url,
        )
        for p in prompts
    ]


def test_tree_steps_by_depth_and_branch_and_sampled_chains_drawn_vs_expected(pairs, tmp_path):
    from backend.service.where_lost import where_lost_over

    pair, db_url = pairs["copy-L5-context"], f"sqlite:///{tmp_path / 'db.sqlite'}"
    trees = _runs(pair, db_url, num_steps=3, topk=3, num_draft_tokens=7)
    sampled = _runs(pair, db_url, num_steps=3, temperature=0.8, seed=2)
    greedy = _runs(pair, db_url, num_steps=3)

    (tree,) = where_lost_over(db_url, [r.run_id for r in trees]).drafts
    steps = [s for r in trees for s in r.steps]
    depths = {t.depth: t for t in tree.tree_depths}
    assert depths[1].attempts == len(steps)  # every tree step judged the root's children
    for t in tree.tree_depths:
        assert t.attempts == sum(t.accepted_by_rank) + t.rejected and t.siblings >= 1
    accepted = sum(sum(t.accepted_by_rank) for t in tree.tree_depths)
    assert accepted == sum(s.accepted_count for s in steps)
    assert sum(t.accepted_by_rank[1] + t.accepted_by_rank[2] for t in tree.tree_depths) > 0, tree.tree_depths
    assert tree.sampled_positions == []

    (chain,) = where_lost_over(db_url, [r.run_id for r in sampled]).drafts
    steps = [s for r in sampled for s in r.steps]
    first = chain.sampled_positions[0]
    assert first.position == 1 and first.attempts == len(steps)
    drawn = sum(round(p.realized * p.attempts) for p in chain.sampled_positions)
    assert drawn == sum(s.accepted_count for s in steps)
    assert all(0 <= p.expected <= 1 for p in chain.sampled_positions) and chain.tree_depths == []

    (plain,) = where_lost_over(db_url, [r.run_id for r in greedy]).drafts
    assert plain.tree_depths == [] and plain.sampled_positions == []
