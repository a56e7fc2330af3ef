"""Regenerate, or check, the committed Python modules for the kubelet APIs.

    python -m cgpu.deviceplugin.api.generate [--repo DIR]  # rewrite *_pb2.py and *_pb2_grpc.py
    python -m cgpu.deviceplugin.api.generate --check       # exit 1 if they do not match

The .proto files are compiled at their import path (`cgpu/deviceplugin/api/...`,
`cgpu/core/api/...`), so the generated modules import each other as `cgpu.*`. Generating
stages the repository's .proto files in that layout first, since the repository keeps the device
plugin in `deviceplugin/`. The check stages the installed .proto files (found through their
packages, so an editable install works too) and compares the compiled descriptors, not the text,
so it does not depend on the grpcio-tools version that generated the committed files. Both need
grpcio-tools; the runtime does not.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

# The import path of each .proto, and the repository folder that holds it.
PROTOS = {
    "cgpu/deviceplugin/api/deviceplugin_v1beta1.proto": "deviceplugin/api",
    "cgpu/core/api/podresources_v1.proto": "cgpu/core/api",
    "cgpu/dra/api/pluginregistration_v1.proto": "cgpu/dra/api",
    "cgpu/dra/api/dra_v1.proto": "cgpu/dra/api",
    "cgpu/dra/api/dra_health_v1.proto": "cgpu/dra/api",
}


def _protoc(root: Path, args: list[str]) -> None:
    from grpc_tools import protoc

    include = str(Path(protoc.__file__).resolve().parent / "_proto")
    code = protoc.main(["grpc_tools.protoc", f"-I{root}", f"-I{include}", *args])
    if code != 0:
        raise SystemExit(f"protoc failed ({code}) on {args}")


def _stage(stage: Path, proto: str, source: Path) -> Path:
    """Copy `source` to its import path `proto` under `stage`; returns the copy."""
    staged = stage / proto
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, staged)
    return staged


def _installed(proto: str) -> Path:
    """The installed copy of `proto`, beside its package's modules."""
    package = importlib.import_module(str(Path(proto).parent).replace("/", "."))
    return Path(package.__file__).resolve().parent / Path(proto).name


def generate(repo: Path) -> None:
    """Write the generated modules next to the repository's .proto files."""
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        for proto, folder in PROTOS.items():
            staged = _stage(stage, proto, repo / folder / Path(proto).name)
            _protoc(stage, [f"--python_out={stage}", f"--grpc_python_out={stage}", proto])
            stem = staged.name.removesuffix(".proto")
            for suffix in ("_pb2.py", "_pb2_grpc.py"):
                shutil.copy(staged.with_name(stem + suffix), repo / folder / (stem + suffix))


def _strip_json_names(proto: object) -> None:
    """Drop json_name, which protoc records in descriptor sets but not in generated code."""
    messages = list(getattr(proto, "message_type", [])) + list(getattr(proto, "nested_type", []))
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _strip_json_names(message)


def stale() -> list[str]:
    """Names of installed .proto files whose module does not match a fresh compile."""
    from google.protobuf import descriptor_pb2

    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "stage"
        for proto in PROTOS:
            name = Path(proto).name
            out = Path(tmp) / f"{name}.pb"
            _stage(stage, proto, _installed(proto))
            _protoc(stage, [f"--descriptor_set_out={out}", proto])
            fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
            _strip_json_names(fresh)
            module_name = proto.removesuffix(".proto").replace("/", ".")
            module = importlib.import_module(f"{module_name}_pb2")
            committed = descriptor_pb2.FileDescriptorProto()
            module.DESCRIPTOR.CopyToProto(committed)
            grpc_module = importlib.import_module(f"{module_name}_pb2_grpc")
            missing = [
                f"{service.name}{suffix}"
                for service in fresh.service
                for suffix in ("Stub", "Servicer")
                if not hasattr(grpc_module, f"{service.name}{suffix}")
            ]
            same = committed.SerializeToString(deterministic=True) == fresh.SerializeToString(
                deterministic=True
            )
            if not same or missing:
                problems.append(name)
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    parser.add_argument(
        "--repo", type=Path, default=Path.cwd(), help="repository root (default: the cwd)"
    )
    args = parser.parse_args(argv)
    if not args.check:
        generate(args.repo)
        return 0
    problems = stale()
    for name in problems:
        print(f"{name}: out of date; run python -m cgpu.deviceplugin.api.generate")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
