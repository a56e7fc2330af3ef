"""Generated gRPC modules for the kubelet's device-plugin API (v1beta1).

The .proto file here is the source; `python -m cgpu.deviceplugin.api.generate` regenerates the
committed `*_pb2.py` and `*_pb2_grpc.py` (and pod-resources' in `cgpu.core.api`), and `--check`
verifies they are up to date.
"""
