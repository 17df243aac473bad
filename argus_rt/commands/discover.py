"""`argus discover <kernel> --region R`: list the async operation sites of a kernel region.

``<kernel>`` is a program directory (``argus_program.json``) of a kind with async-site discovery (the
kind registry's ``discover_async_sites`` hook; today Triton's), or a ``.ttgir`` file, which is Triton's
IR (then ``--iterations`` is required). Compiles for sm_90 on the CPU when needed. Both print the
same table, read from the ``argus.async_sites/1`` document that ``--json`` writes; the MCP server's
``discover`` tool returns the same document (:func:`argus_rt.mcp_server.async_sites`).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

from ..errors import ArgusInputError
from ..kinds.registry import get_kind  # at the top, also for a .ttgir input: see argus_rt.errors
from .output import STDOUT, human_console, write_json


def register(sub) -> None:
    p = sub.add_parser("discover", help="list async sites (TMA, WGMMA, cp.async) in a kernel region "
                                        "(Triton programs and .ttgir files)")
    p.add_argument("kernel", help="program directory (argus_program.json) of a kind with async-site discovery, "
                                  "or a Triton .ttgir file")
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


def _probe_arg(args) -> tuple[str, int] | None:
    """--emit-probe's (op, iteration), checked before anything compiles."""
    if not args.emit_probe:
        return None
    op, _, it = args.emit_probe.partition("@")
    if not op or not it.isdigit() or not args.out:
        raise ArgusInputError(f"--emit-probe takes OP@ITER (e.g. a@3) and needs --out; got {args.emit_probe!r}")
    return op, int(it)


# ---- a .ttgir file: Triton's IR, read by the Triton kind's discovery directly ---------------------
def _ttgir_file(args, path: Path, probe: tuple[str, int] | None) -> tuple[dict, str | None]:
    from ..kinds.triton.discovery import DiscoveryError, async_sites_document, discover

    if args.iterations is None:
        raise DiscoveryError("a .ttgir input needs --iterations (the logical K-loop trip count)")
    ttgir = path.read_text(encoding="utf-8")
    d = discover(ttgir, args.region, iterations=args.iterations)
    doc = async_sites_document(d, str(path))
    if probe is None:
        return doc, None
    from ..fsutil import atomic_write_text
    from ..kinds.triton.probes import make_forced_wait_probe

    made = make_forced_wait_probe(ttgir, d, probe[0], probe[1])
    atomic_write_text(Path(args.out), made.ttgir)
    return doc, made.key


# ---- a program: through its kind's hooks -------------------------------------------------------
def _program(args, path: Path, probe: tuple[str, int] | None) -> tuple[dict, str | None]:
    from ..mcp_server import async_sites
    from ..program import load_program

    program = load_program(path)
    kind = get_kind(program.kind)
    if args.iterations is not None:  # the launch's iterations, overridden: the version this document describes
        launch = {**program.launch, "iterations": args.iterations}
        program = dataclasses.replace(program, launch_json=json.dumps(launch, sort_keys=True, separators=(",", ":")))
    doc = async_sites(kind, program, args.region)  # a kind without the hook: one line naming those with it
    if probe is None:
        return doc, None
    site = _site(doc, probe[0])
    variant = program.variant_of("probe", op_id=int(site["op_id"], 16), iteration=probe[1])
    with tempfile.TemporaryDirectory(prefix="argus-probe-") as outdir:
        made = kind.call("forced_wait_probe", program, variant, Path(outdir))
        shutil.copyfile(made["ttgir"], args.out)
        desc = json.loads(Path(made["probe"]).read_text(encoding="utf-8"))
    return doc, f"{desc['op_id']}@{desc['iteration']}"


def _site(doc: dict, op: str) -> dict:
    """The document's site ``op`` (op ID ``0x...`` or label), or one line naming the valid ones."""
    for s in doc["sites"]:
        if op.lower() == s["op_id"].lower() or op == s["label"]:
            return s
    valid = ", ".join(f"{s['op_id']} ({s['kind']} {s['label']})" for s in doc["sites"]) or "none"
    raise ArgusInputError(f"no async site {op!r} in region {doc['region']!r}; valid: {valid}")


def _span(its: list[int]) -> str:
    if not its:
        return "-"
    return str(its[0]) if len(its) == 1 else f"{its[0]}..{its[-1]}"


def _at(by_iteration: dict, i: int):
    """A per-iteration entry of the document, read in memory (int keys) or from JSON (str keys)."""
    return by_iteration[i] if i in by_iteration else by_iteration[str(i)]


def print_sites(console, doc: dict) -> None:
    """The human table of an ``argus.async_sites/1`` document."""
    from rich.table import Table

    sites = doc["sites"]
    table = Table(title=f"{doc['kernel']}: async sites in {doc['region']} ({doc['iterations']} iterations)")
    for col in ("op id", "kind", "value", "region", "source", "instances (TTGIR line: iterations)"):
        table.add_column(col, overflow="fold")
    for s in sites:
        inst = ", ".join(f"{i['placement'][0].upper()}{i['ttgir_line']}:{_span(i['iterations'])}" for i in s["instances"])
        table.add_row(s["op_id"], s["kind"], s["label"], s["region"], s["source"], inst)
    console.print(table)
    for s in sites:
        console.print(f"{s['op_id']} ({s['label']}) completes on: {s['completion_text']}")
    for s in sites:
        if s["kind"] == "tma_load":
            c = s["completion"]
            per = ", ".join(f"{i}:s{_at(c['slot_by_iteration'], i)}/p{_at(c['phase_by_iteration'], i)}"
                            for i in s["logical_iterations"])
            console.print(f"{s['op_id']} ({s['label']}) iteration:slot/phase  {per}")
    for u in doc["unsupported"]:
        console.print(f"[yellow]unsupported:[/] {u}")
    # probe candidates: every (site, iteration) the document offers to probe; per kind, every iteration served
    per_kind = ", ".join(f"{k} {sum(len(s['logical_iterations']) for s in sites if s['kind'] == k)}"
                         for k in sorted({s["kind"] for s in sites}))
    total = sum(len(s["iterations"]) for s in sites)
    console.print(f"probe candidates (op x iteration): {total}" + (f" ({per_kind})" if per_kind else ""))


def run(args) -> int:
    if args.iterations is not None and args.iterations < 1:  # checked before the compiler stack loads
        raise ArgusInputError(f"--iterations must be >= 1 (logical K-loop iterations), got {args.iterations}")
    probe = _probe_arg(args)
    console = human_console(args)
    path = Path(args.kernel)
    doc, probe_key = (_ttgir_file if path.suffix == ".ttgir" else _program)(args, path, probe)
    if args.json_out:
        write_json(args.json_out, doc)
    print_sites(console, doc)
    if probe_key is not None:
        console.print(f"wrote probe {probe_key} to {args.out}")
    return 0
