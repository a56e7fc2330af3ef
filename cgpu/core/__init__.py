"""The lowest layer: what every part of cgpu shares.

Config files, ledgers, container directories and their layout, GPU discovery, the native
pieces' paths, the description of what a container is given, clean-up, and the kubelet's
pod-resources client. Nothing here imports from the rest of cgpu.
"""
