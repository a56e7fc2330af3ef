"""`cgpu dra-driver`: a kubelet DRA plugin that shares a GPU by memory and compute capacity."""
