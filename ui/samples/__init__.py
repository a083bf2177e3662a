"""The Samples page's render code: import, the datasets, and the sample browser (pages/1_Samples.py
wires them)."""
