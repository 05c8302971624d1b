"""``acl-mem`` command line: ``acl-mem info`` shows the backend, why, and memory per pool."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__, _backend
from .device import Device
from .errors import AclError, BackendError

__all__ = ["main"]


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def collect_info() -> dict[str, object]:
    """Backend, reason, description and per-device pools as plain data."""
    backend = _backend.get()
    info: dict[str, object] = {
        "acl_mem": __version__,
        "backend": backend.name,
        "reason": _backend.backend_reason(),
        "details": backend.describe(),
    }
    devices: list[dict[str, object]] = []
    for device_id in range(Device.count()):
        with Device(device_id) as device:
            pools = {attr.name: {"free": m.free, "total": m.total}
                     for attr, m in device.pools().items() if m.total}
        devices.append({"id": device_id, "pools": pools})
    info["devices"] = devices
    return info


def _print_info(info: dict[str, object]) -> None:
    print(f"acl_mem {info['acl_mem']}")
    print(f"backend: {info['backend']}")
    print(f"why:     {info['reason']}")
    details = info["details"]
    assert isinstance(details, dict)
    for key, value in details.items():
        print(f"  {key}: {value}")
    devices = info["devices"]
    assert isinstance(devices, list)
    print(f"devices: {len(devices)}")
    for device in devices:
        print(f"  device {device['id']}:")
        for name, pool in device["pools"].items():
            print(f"    {name:<22} free {_gib(pool['free']):>12} of {_gib(pool['total']):>12}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acl-mem", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    info = sub.add_parser("info", help="backend, why it was chosen, devices and memory pools")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument("--backend", choices=_backend.BACKEND_NAMES,
                      help="choose the backend (default: ACL_MEM_BACKEND or auto)")
    check = sub.add_parser("conformance", help="run the shipped conformance checks and "
                           "report, per behaviour, the rule, expected and observed outcome")
    check.add_argument("--backend", choices=("native", "fake", "all"), default="all",
                       help="backend to check (default: every available one)")
    check.add_argument("--json", metavar="FILE", help="also write the outcomes as JSON")
    check.add_argument("--differential", action="store_true",
                       help="send the same random operation sequences to the fake and to "
                       "native and report the first divergence as a minimal example")
    check.add_argument("--examples", type=int, default=200,
                       help="sequences tried by --differential (default 200)")
    args = parser.parse_args(argv)
    if args.command == "conformance":
        if args.differential:
            from .conformance.differential import run_differential

            return run_differential(max_examples=args.examples)
        from .conformance.runner import run_checks

        return run_checks(args.backend, args.json)
    if args.command in (None, "info"):
        try:
            if getattr(args, "backend", None):
                _backend.use_backend(args.backend)
            data = collect_info()
        except (BackendError, AclError) as exc:
            print(f"acl-mem: {exc}", file=sys.stderr)
            return 1
        try:
            if getattr(args, "json", False):
                print(json.dumps(data, indent=2))
            else:
                _print_info(data)
        except BrokenPipeError:
            # `acl-mem info | head` closed the pipe: not an error of ours.
            sys.stderr.close()
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
