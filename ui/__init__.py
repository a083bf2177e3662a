"""Streamlit helpers shared by the pages: session state, token rendering, charts. No torch here."""
