"""Generated gRPC modules for the kubelet's plugin registration (v1) and DRA (v1) APIs.

The .proto files here are the source; `python -m cgpu.deviceplugin.api.generate` regenerates the
committed `*_pb2.py` and `*_pb2_grpc.py` with the other kubelet APIs', and `--check` verifies
they are up to date.
"""
