"""`cgpu mps-daemon`: one NVIDIA MPS control daemon per GPU, supervised, with published health."""
