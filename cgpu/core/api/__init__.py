"""The kubelet's pod-resources API v1: the .proto and its generated modules.

`python -m cgpu.deviceplugin.api.generate` regenerates them (with the device-plugin API).
"""
