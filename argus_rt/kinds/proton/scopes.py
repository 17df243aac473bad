"""The Proton scopes of a ``kind="proton"`` program, found by Proton itself, and the regions they are.

Which scopes a kernel opens, and inside which, is what Proton's own scope analysis says of the
kernel's TTIR (``triton._C.libtriton.proton.get_scope_id_names`` / ``get_scope_id_parents``, the calls
Proton's instrumentation hook makes on every instrumented kernel it loads). The TTIR is built here on
the CPU by Triton's frontend with Proton's instrumentation flag raised for the duration of the build,
so ``pl.enter_scope`` / ``pl.exit_scope`` / ``pl.scope`` become ``proton.record`` ops; no GPU and no
Proton session are needed.

Each scope is the region named by its path of enclosing scopes (scope ``max`` inside ``normalize``
inside ``row`` is region ``row/normalize/max``). The program still declares its regions in its
manifest, as every program does: a program version (and its id) is fixed when it is loaded and a
query names its region before anything is compiled. :func:`check_program` (the kind's plan-time
check) requires the manifest to be exactly the scope tree, so a renamed or moved scope is a one-line
error at plan time instead of an unmatched record after a GPU run.

Proton's trace names each record by its scope name only, so a scope name may be used at one place in
the tree only (a name opened under two different parents is refused here).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ArgusInputError
from ...regions import RegionError, region_id


class ProtonScopeError(ArgusInputError):
    """A kernel without Proton scopes, or scopes that are not the program's declared regions."""


@dataclass(frozen=True)
class Scope:
    """One Proton scope of a kernel: its name and the region (path of enclosing scope names) it is."""

    name: str
    region: str  # qualified region name, e.g. "row/normalize/max"


def scopes_from_proton(names: list[tuple[int, str]], parents: list[tuple[int, int]], where: str) -> list[Scope]:
    """The scopes of Proton's scope analysis: ``names`` [(scope id, name)] and ``parents`` [(scope id,
    parent scope id)] (roots have no entry), in scope-id order. Raises :class:`ProtonScopeError` for a
    name used by two scopes at different places, a parent id Proton did not name, or a cycle."""
    by_id = dict(names)
    parent_of = dict(parents)
    unknown = sorted({p for p in parent_of.values() if p not in by_id} | {c for c in parent_of if c not in by_id})
    if unknown:
        raise ProtonScopeError(f"{where}: Proton's scope analysis names parents/children {unknown} it gives no name")
    out: dict[str, Scope] = {}
    for sid in sorted(by_id):
        path, seen, cur = [], set(), sid
        while cur is not None:
            if cur in seen:
                raise ProtonScopeError(f"{where}: Proton scope {by_id[sid]!r} is its own ancestor")
            seen.add(cur)
            path.append(by_id[cur])
            cur = parent_of.get(cur)
        region = "/".join(reversed(path))
        try:
            region_id(region)
        except RegionError:
            raise ProtonScopeError(f"{where}: Proton scope {by_id[sid]!r} (path {region!r}) cannot be an Argus "
                                   "region: scope names must use only letters, digits, '_', '-', '.', ':'") from None
        name = by_id[sid]
        if name in out and out[name].region != region:
            raise ProtonScopeError(f"{where}: Proton scope {name!r} is opened at two places ({out[name].region!r} and "
                                   f"{region!r}); Proton's trace names records by scope name only, so give each "
                                   "place its own name")
        out.setdefault(name, Scope(name, region))
    return list(out.values())


def _kernel_ttir(program):
    """(TTIR module, its MLIR context) of the program's kernel with Proton's scopes as ``proton.record`` ops."""
    import triton
    import triton.profiler.language as pl
    from triton._C.libtriton import ir
    from triton._C.libtriton import proton as proton_ir
    from triton.compiler import make_backend
    from triton.profiler.flags import flags

    from ..triton.program import load_kernel, target_of
    from ..triton.specialization import specialize

    _mod, fn, args, kwargs = load_kernel(program)
    target = target_of(program)
    options, signature, constexprs, attrs = specialize(fn, args, kwargs, target)
    backend = make_backend(target)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    proton_ir.load_dialects(context)
    # Proton's frontend emits records only while its instrumentation flag is up, and (by default) only
    # for Gluon kernels: raise both for this one build and put them back as they were.
    was_on, had_triton = flags.instrumentation_on, pl._ALL_SEMANTICS["triton"] in pl._SEMANTICS
    flags.instrumentation_on = True
    pl.enable_semantic("triton")
    try:
        src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
        module = src.make_ir(target, options, backend.get_codegen_implementation(options),
                             backend.get_module_map(), context)
    finally:
        flags.instrumentation_on = was_on
        if not had_triton:
            pl.disable_semantic("triton")
    return module, context


def kernel_scopes(program) -> list[Scope]:
    """The kernel's Proton scopes, as Proton's scope analysis finds them in its TTIR (module docstring)."""
    from triton._C.libtriton import proton as proton_ir

    where = f"kernel {program.launch.get('kernel')!r} of {program.launch.get('module')}"
    try:
        module, _context = _kernel_ttir(program)
    except ArgusInputError:
        raise
    except ImportError as exc:
        raise ProtonScopeError(f"{where}: Proton (triton.profiler) cannot be imported: {exc}") from None
    except Exception as exc:  # Triton's frontend on the user's kernel: one line
        first = next((ln.strip() for ln in reversed(str(exc).splitlines()) if ln.strip()), "")
        raise ProtonScopeError(f"{where}: building its TTIR with Proton's scopes failed: "
                               f"{type(exc).__name__}: {first}") from None
    return scopes_from_proton(list(proton_ir.get_scope_id_names(module)),
                              list(proton_ir.get_scope_id_parents(module)), where)


def check_scopes_are_regions(scopes: list[Scope], declared: list[str], where: str) -> None:
    """Raise :class:`ProtonScopeError` unless the scope tree is exactly the ``declared`` region names."""
    if not scopes:
        raise ProtonScopeError(f"{where} has no Proton scopes (pl.enter_scope / pl.exit_scope or pl.scope from "
                               "triton.profiler.language); a proton program's regions are its scopes")
    found = {s.region for s in scopes}
    missing, extra = sorted(found - set(declared)), sorted(set(declared) - found)
    if missing or extra:
        parts = ([f"scopes not in the manifest: {', '.join(missing)}"] if missing else []) + \
                ([f"manifest regions with no scope: {', '.join(extra)}"] if extra else [])
        raise ProtonScopeError(f"{where}: the region manifest must be the kernel's Proton scope tree; "
                               f"{'; '.join(parts)} (the scope tree: {', '.join(sorted(found))})")


def check_program(program) -> None:
    """Plan-time check of a proton program (the kind's ``check_compiles`` hook): its kernel has Proton
    scopes and they are the regions its manifest declares."""
    where = f"kernel {program.launch.get('kernel')!r} of {program.launch.get('module')}"
    check_scopes_are_regions(kernel_scopes(program), [r.name for r in program.regions], where)


def region_of_scope(program) -> dict:
    """{Proton scope name: :class:`argus_rt.regions.Region`} of a proton program's declared regions (a
    region's last path component is its scope's name; :func:`check_program` has checked they are the
    kernel's scopes)."""
    out: dict = {}
    for region in program.regions:
        if region.leaf in out:
            raise ProtonScopeError(f"program {program.name}: regions {out[region.leaf].name!r} and {region.name!r} end "
                                   "in the same name; Proton names records by scope name only")
        out[region.leaf] = region
    return out
