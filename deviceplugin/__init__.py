"""`cgpu device-plugin`: advertises GPU memory units to the kubelet and injects the shim."""
