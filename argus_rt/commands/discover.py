"""`argus discover <kernel> --region R`: list the async operation sites of a Triton kernel region.

``<kernel>`` is a Triton program directory (with ``argus_program.json``, ``kind: "triton"``) or a
``.ttgir`` file (then ``--iterations`` is required). Compiles for sm_90 on the CPU when needed.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ArgusInputError
from .output import STDOUT, human_console, write_json


def register(sub) -> None:
    p = sub.add_parser("discover", help="list async sites (TMA, WGMMA, cp.async) in a Triton kernel region")
    p.add_argument("kernel", help="Triton program directory (argus_program.json) or a .ttgir file")
    p.add_argument("--region", default=None, help="qualified region name (default: every region)")
    p.add_argument("--iterations", type=int, default=None,
                   help="logical K-loop iterations, >= 1 (default: the program's launch.iterations)")
    # A bare --json (before another option or at the end) still means stdout, as it used to.
    p.add_argument("--json", dest="json_out", metavar="FILE", nargs="?", const=STDOUT, default=None,
                   help="write the async_sites JSON document to FILE ('-' or bare --json: stdout, and the "
                        "table goes to stderr)")
    p.add_argument("--emit-probe", metavar="OP@ITER", default=None,
                   help="also write the forced-wait probe TTGIR for op (ID or label) at ITER to --out")
    p.add_argument("--out", default=None, help="file for --emit-probe")
    p.set_defaults(func=run, input_errors=(OSError,))  # an unreadable .ttgir or --out, as before


def _load(args) -> tuple[str, int, str]:
    from ..kinds.triton.discovery import DiscoveryError, program_ttgir

    path = Path(args.kernel)
    if path.suffix == ".ttgir":
        if args.iterations is None:
            raise DiscoveryError("a .ttgir input needs --iterations (the logical K-loop trip count)")
        return path.read_text(encoding="utf-8"), args.iterations, str(path)
    from ..program import load_program

    program = load_program(path)
    ttgir, iterations = program_ttgir(program)
    return ttgir, iterations if args.iterations is None else args.iterations, program.id


def _span(its: list[int]) -> str:
    if not its:
        return "-"
    return str(its[0]) if len(its) == 1 else f"{its[0]}..{its[-1]}"


def run(args) -> int:
    if args.iterations is not None and args.iterations < 1:  # checked before the compiler stack loads
        raise ArgusInputError(f"--iterations must be >= 1 (logical K-loop iterations), got {args.iterations}")
    from rich.table import Table

    from ..kinds.triton.discovery import async_sites_document, discover
    from ..kinds.triton.probes import ProbeError, make_forced_wait_probe

    console = human_console(args)
    ttgir, iterations, ident = _load(args)
    d = discover(ttgir, args.region, iterations=iterations)
    if args.json_out:
        write_json(args.json_out, async_sites_document(d, ident))
    table = Table(title=f"{d.kernel}: async sites in {d.region} ({iterations} iterations)")
    for col in ("op id", "kind", "value", "region", "source", "instances (TTGIR line: iterations)"):
        table.add_column(col, overflow="fold")
    for s in d.sites:
        inst = ", ".join(f"{i.placement[0].upper()}{i.ttgir_line}:{_span(i.iterations)}" for i in s.instances)
        table.add_row(f"0x{s.op_id:08x}", s.kind, s.label, s.region, str(s.source), inst)
    console.print(table)
    for s in d.sites:
        console.print(f"0x{s.op_id:08x} ({s.label}) completes on: {s.completion.describe()}")
    for s in d.sites:
        if s.kind == "tma_load":
            per = ", ".join(f"{i}:s{s.completion.slot_by_iteration[i]}/p{s.completion.phase_by_iteration[i]}"
                            for i in s.iterations)
            console.print(f"0x{s.op_id:08x} ({s.label}) iteration:slot/phase  {per}")
    for u in d.unsupported:
        console.print(f"[yellow]unsupported:[/] {u}")
    per_kind = ", ".join(f"{k} {len(d.candidates(k))}" for k in sorted({s.kind for s in d.sites}))
    console.print(f"probe candidates (op x iteration): {len(d.candidates())}" + (f" ({per_kind})" if per_kind else ""))
    if args.emit_probe:
        op, _, it = args.emit_probe.partition("@")
        if not it.isdigit() or not args.out:
            raise ProbeError(f"--emit-probe takes OP@ITER (e.g. a@3) and needs --out; got {args.emit_probe!r}")
        probe = make_forced_wait_probe(ttgir, d, op, int(it))
        from ..fsutil import atomic_write_text

        atomic_write_text(Path(args.out), probe.ttgir)
        console.print(f"wrote probe {probe.key} to {args.out}")
    return 0
