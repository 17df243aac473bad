"""`argus build`: compile a CUDA source in one or all Argus modes (cached) and summarise the SASS."""
from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("build", help="compile a CUDA source in Argus modes 0/1/2 (content-hash cache)")
    p.add_argument("source", help=".cu file (includes argus/argus.cuh)")
    p.add_argument("--mode", default="all", choices=["0", "1", "2", "all"],
                   help="0 off, 1 marker-only, 2 trace, all (default)")
    p.add_argument("--arch", default="sm_90a", help="GPU code, e.g. sm_90a (default), sm_90, sm_80")
    p.add_argument("--backend", default="nvcc", choices=["nvcc", "nvrtc"])
    p.add_argument("-I", dest="include", action="append", default=[], help="extra include directory")
    p.add_argument("-D", dest="define", action="append", default=[], help="NAME or NAME=VALUE")
    p.add_argument("--name", help="module name (default: the source's stem)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from ..kinds.cuda.build import CudaBuildError, CudaBuildSpec, build, disassemble, sass_instructions
    from ..markers import MarkerDecodeError, decode_marker

    modes = [0, 1, 2] if args.mode == "all" else [int(args.mode)]
    defines = {}
    for d in args.define:
        key, _, value = d.partition("=")
        defines[key] = value if value else None
    name = args.name or Path(args.source).stem
    for mode in modes:
        try:
            spec = CudaBuildSpec(f"{name}.mode{mode}", [args.source], argus_mode=mode, arch=args.arch,
                                 include_dirs=args.include, defines=defines)
            res = build(spec, backend=args.backend)
        except CudaBuildError as exc:
            print(f"argus build: {exc}", file=sys.stderr)
            return 1
        line = f"mode {mode}: {res.cubin} ({'cached' if res.cached else 'built'}, key {res.key[:12]})"
        try:
            ins = sass_instructions(disassemble(res.cubin))
        except CudaBuildError as exc:
            print(f"{line}; SASS not read: {exc}")
            continue
        pm = [int(ops, 16) for op, ops in ins if op == "PMTRIG"]
        markers = 0
        for i in range(0, len(pm) - 2, 3):
            try:
                decode_marker(pm[i : i + 3])
                markers += 1
            except MarkerDecodeError:
                pass
        print(f"{line}; {len(ins)} SASS instructions, {markers} marker footprints")
    return 0
