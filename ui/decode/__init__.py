"""The Decode page's render code: the replay form, the run header, the step viewer with its
hidden-state panel, the reference adder and the run summary (pages/2_Decode.py wires them)."""
