"""The Diagnostics page's render code, one module a tab (pages/4_Diagnostics.py wires them)."""
