"""The Compare page's render code: the two-draft form, the batch table with its summary, and two
runs side by side (pages/3_Compare.py wires them); `timeline` aligns runs without Streamlit."""
