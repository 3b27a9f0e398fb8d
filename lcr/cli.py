"""The `lcr` command line: one subcommand per module, each registered through `register`."""
from __future__ import annotations

import argparse
import sys

from lcr.errors import LcrInputError


def _command_modules():
    # Imported here so `lcr --help` stays fast and a broken optional part names itself.
    from lcr.checkpoints import cli as ckpt_cli
    from lcr.embedding import bench_cli
    from lcr.kv import cli as kv_cli
    from lcr.lpc import cli as lpc_cli
    from lcr.predict import cli as predict_cli
    from lcr.route import cli as route_cli
    from lcr.sim import cli as sim_cli
    from lcr.sim import predict_eval_cli

    return [sim_cli, ckpt_cli, kv_cli, predict_cli, predict_eval_cli, bench_cli, route_cli, lpc_cli]


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags are one line naming the problem (not argparse's usage block), exit 2, and
    a flag is only its full name (an abbreviation could silently mean another flag once
    one is added); subcommands inherit it (add_subparsers makes parsers of the parent's
    class)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="lcr", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in _command_modules():
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LcrInputError as err:
        print(f"lcr {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        sys.stderr.close()
        return 0
