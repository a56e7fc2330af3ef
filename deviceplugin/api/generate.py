"""Regenerate, or check, the committed Python modules for the kubelet APIs.

    python -m deviceplugin.api.generate          # rewrite *_pb2.py and *_pb2_grpc.py
    python -m deviceplugin.api.generate --check  # exit 1 if they do not match the .proto files

The check compares the compiled descriptors, not the text, so it does not depend on the
grpcio-tools version that generated the committed files. It needs grpcio-tools; the runtime
does not.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
REPO_ROOT = API_DIR.parent.parent
PROTOS = ("deviceplugin_v1beta1.proto", "podresources_v1.proto")


def _protoc(args: list[str]) -> None:
    from grpc_tools import protoc

    include = str(Path(protoc.__file__).resolve().parent / "_proto")
    code = protoc.main(["grpc_tools.protoc", f"-I{REPO_ROOT}", f"-I{include}", *args])
    if code != 0:
        raise SystemExit(f"protoc failed ({code}) on {args}")


def generate() -> None:
    """Write the generated modules next to the .proto files."""
    for name in PROTOS:
        proto = f"deviceplugin/api/{name}"
        _protoc([f"--python_out={REPO_ROOT}", f"--grpc_python_out={REPO_ROOT}", proto])


def _strip_json_names(proto: object) -> None:
    """Drop json_name, which protoc records in descriptor sets but not in generated code."""
    messages = list(getattr(proto, "message_type", [])) + list(getattr(proto, "nested_type", []))
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _strip_json_names(message)


def stale() -> list[str]:
    """Names of .proto files whose committed module does not match a fresh compile."""
    from google.protobuf import descriptor_pb2

    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in PROTOS:
            out = Path(tmp) / f"{name}.pb"
            _protoc([f"--descriptor_set_out={out}", f"deviceplugin/api/{name}"])
            fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
            _strip_json_names(fresh)
            stem = name.removesuffix(".proto")
            module = importlib.import_module(f"deviceplugin.api.{stem}_pb2")
            committed = descriptor_pb2.FileDescriptorProto()
            module.DESCRIPTOR.CopyToProto(committed)
            grpc_module = importlib.import_module(f"deviceplugin.api.{stem}_pb2_grpc")
            missing = [
                f"{service.name}{suffix}"
                for service in fresh.service
                for suffix in ("Stub", "Servicer")
                if not hasattr(grpc_module, f"{service.name}{suffix}")
            ]
            if committed.SerializeToString(deterministic=True) != fresh.SerializeToString(
                deterministic=True
            ) or missing:
                problems.append(name)
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    args = parser.parse_args(argv)
    if not args.check:
        generate()
        return 0
    problems = stale()
    for name in problems:
        print(f"{name}: generated module is out of date; run python -m deviceplugin.api.generate")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
