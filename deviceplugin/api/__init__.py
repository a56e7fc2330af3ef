"""Generated gRPC modules for the kubelet's device-plugin (v1beta1) and pod-resources (v1) APIs.

The .proto files here are the source; `python -m deviceplugin.api.generate` regenerates the
committed `*_pb2.py` and `*_pb2_grpc.py`, and `--check` verifies they are up to date.
"""
