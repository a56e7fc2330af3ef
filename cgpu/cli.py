"""The `cgpu` command: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from cgpu.core.layout import DRA_DRIVER

# subcommand -> (module, help): one line per subcommand. Each module defines register(parser) and
# run(args) -> int, which turns the parsed options into the command's frozen Config once. The
# modules are imported only when their subcommand runs (`cgpu hook` runs for every container),
# and all lie below this one (tests/core/test_layers.py).
COMMANDS: dict[str, tuple[str, str]] = {
    "shim-path": ("cgpu.commands.shim_path", "print the installed shim's absolute path"),
    "run": ("cgpu.commands.run", "run a command under a GPU memory slice"),
    "ledger": ("cgpu.commands.ledger", "show a container ledger: slices, use, processes"),
    "smi": ("cgpu.commands.smi", "show GPU memory as NVML reports it in this process"),
    "device-plugin": ("cgpu.deviceplugin.cmd.cli", "serve the kubelet device-plugin API"),
    "dra-driver": ("cgpu.dra.cli", f"serve the kubelet DRA API ({DRA_DRIVER})"),
    "mps-daemon": ("cgpu.mps.cli", "run and supervise one MPS control daemon per GPU"),
    "hook": ("cgpu.hooks.cli", "OCI runtime hook that injects the shim"),
    "cdi": ("cgpu.hooks.cdi", "write a CDI spec that injects the shim"),
    "exporter": ("cgpu.exporter.cli", "serve Prometheus metrics"),
    "scheduler-extender": ("cgpu.scheduler.cli", "serve the kube-scheduler extender (gpushare)"),
    "compute-arbiter": ("cgpu.compute.cli", "time-slice GPUs among containers with compute limits"),
    "webhook": ("cgpu.webhook.cli", "serve the admission webhook: gpushare pods as DRA claims"),
}


class _Version(argparse.Action):
    """`cgpu --version`: the release and the ledger layouts it writes and reads."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from cgpu.core.release import version_line

        print(version_line())
        parser.exit()


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Build the parser, importing only the subcommand being run."""
    parser = argparse.ArgumentParser(prog="cgpu", description="GPU sharing with memory isolation")
    parser.add_argument(
        "--version", nargs=0, action=_Version, help="print the release and its ledger layouts"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:
            importlib.import_module(module).register(child)
            child.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `cgpu` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(args_list).parse_args(args_list)
    module = importlib.import_module(args._module)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
