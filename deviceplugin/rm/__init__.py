"""The resource manager: the GPUs and their health, and the allocation policies (memory,
compute, Volcano) behind one interface, `policy.AllocationPolicy`."""
