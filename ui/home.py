"""Home's account of the bundled demo: what each draft is, what is wrong with `miswired`, and the
clicks that reveal it, each step a link that opens its page set up for it."""

from __future__ import annotations

import streamlit as st

from backend.defaults import REPO
from backend.service.demo_story import DemoStory, demo_story

SEED_STORY = REPO / "docs" / "seed-story.md"


@st.cache_data(show_spinner=False, max_entries=4)
def story_of(target_path: str) -> DemoStory | None:
    return demo_story(target_path)


def show_demo_story(target_path: str) -> None:
    with st.spinner("Reading the bundled drafts as the engines read them..."):
        story = story_of(target_path)
    if story is None:
        return
    trained, declared = list(story.trained_aux_hf_indices), list(story.declared_aux_hf_indices)
    st.subheader("What the bundled demo shows")
    st.markdown(
        "A small Llama target that writes Python (`demo/target`) and three EAGLE-3 drafts trained on its "
        "hidden states, the way SpecForge trains them:\n"
        "- **final**: trained fully; the healthy reference.\n"
        "- **epoch1**: the same training stopped after one epoch: accepted less, but honestly wired.\n"
        f"- **{story.broken}**: the broken one. It was trained on HF hidden states **{trained}** "
        f"({story.trained_words}), but its config declares **{declared}** "
        f"({story.declared_words}; {story.declared_source}). Every engine serves it what the "
        "config declares, so it is fed layers it never saw: its weights are fine, its inputs are wrong, "
        "and its drafts are rejected almost at once. This is the bug of the seed story (below)."
    )
    st.markdown("**Start here**: four clicks that find the bug the way a user would.")
    st.page_link(
        "pages/3_Compare.py",
        label=f"1. Compare final with {story.broken} on a demo sample: where its drafts are rejected",
        query_params={"a": "final", "b": story.broken},
    )
    st.page_link(
        "pages/4_Diagnostics.py",
        label=f"2. Diagnose {story.broken} (press Diagnose): the verdict names the cause and its fix",
        query_params={"draft": story.broken},
    )
    st.markdown(
        "3. On that page, the **Wiring probe** tab: which layers the draft was really trained on, tried "
        "candidate by candidate (teacher-forced accuracy).\n"
        "4. Then the **Serving-flag lint** tab: the SGLang or vLLM launch command, and the config fix that "
        "uses the probe's wiring."
    )
    if SEED_STORY.is_file():
        with st.expander("The seed story: the debugging session SpecLens grew from (docs/seed-story.md)"):
            st.markdown(SEED_STORY.read_text())
