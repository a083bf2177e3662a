"""Samples: registered datasets, import (path or upload), filters, and the sample view. The render
code lives in ui/samples/."""

from __future__ import annotations

import streamlit as st

from backend.service import datasets as stored_datasets
from ui import state
from ui.samples import browse, datasets, importer

st.set_page_config(page_title="SpecLens · Samples", layout="wide")
state.sidebar()
st.title("Samples")

importer.import_section()
registered = stored_datasets.list_datasets(state.db())
if not registered:
    st.info("No dataset yet: import one above.")
    st.stop()
dataset = datasets.pick_dataset(registered)
browse.browse(dataset)
