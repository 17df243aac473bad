"""Program versions: an exact program (sources + flags + compiler + launch), content-hashed.

A :class:`ProgramVersion` is identified by ``id`` = ``"pv-"`` + 16 hex digits of a SHA-256 over its
source contents, build flags, compiler version, launch configuration, kind, and (for variants)
the variant name, its parameters and its base version. Editing a source makes a new version.

Variants (``trace_free``, ``marker_only``, ``traced``, ``probe``) are derived from a base version by
:meth:`ProgramVersion.variant`; they keep the region tree and point back to the base with ``base``.
Evidence from two versions may be joined only when they share a base (:func:`check_joinable`);
an edited program (``derive``) starts a new base and links to its predecessor with ``parent``.

A program on disk is a directory (or JSON file) with ``argus_program.json``::

    {"name": "nested", "kind": "cuda", "sources": ["kernel.cu", "helper.cuh"],
     "flags": ["-O3"], "compiler": "nvcc 13.0" (optional: detected), "regions": "regions.json",
     "warp_roles": {"producer": [0], "consumer": [1, 2, 3]} (optional),
     "launch": {...}}   # read by backend adapters; its keys depend on kind

``regions`` names a region manifest (see :mod:`argus_rt.regions`) or holds one inline;
``warp_roles`` names the warps (indices within a CTA) of each role a ``warp_role`` scope may select.
The published JSON Schema, ``argus_rt/schemas/program.schema.json``, lists every key and value.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from .errors import ArgusInputError
from .fsutil import read_json_file
from .kinds.registry import find_kind, kind_names
from .nvcc_flags import allowed_flag_forms, unsafe_flag
from .regions import RegionError, RegionTree
from .warp_roles import WarpRoleError, check_warp_roles, warps_per_cta

PROGRAM_FILE = "argus_program.json"
VARIANTS = ("base", "trace_free", "marker_only", "traced", "probe")
# A program name becomes part of file names (build caches, cubins): no path syntax, ever. The schema
# (program.schema.json, "name") states the same pattern.
PROGRAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# launch keys that name files of the program directory ("reference": "<file>:<function>")
LAUNCH_FILE_KEYS = ("source", "module")
LAUNCH_FILE_FUNCTION_KEYS = ("reference", "runner")
# ``sources`` and ``launch.source`` may also name Argus's own shipped CUDA tree (csrc/, on every CUDA
# build's include path anyway), e.g. "csrc:megakernel/megakernel.cu": content-hashed like local files,
# and resolved only inside that tree.
SHIPPED_SOURCE_PREFIX = "csrc:"


class ProgramError(ArgusInputError):
    """A program description that cannot be loaded or a variant that cannot be made."""


class IncompatibleVersionsError(ProgramError):
    """Evidence from program versions that do not share a base cannot be joined."""


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def source_digest(sources: Mapping[str, bytes | str]) -> str:
    """SHA-256 over (name, content) pairs in name order."""
    h = hashlib.sha256()
    for name in sorted(sources):
        data = sources[name]
        data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        h.update(name.encode("utf-8") + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


@dataclass(frozen=True)
class ProgramVersion:
    """One exact program. Create with :meth:`from_sources` or :func:`load_program`."""

    name: str
    kind: str
    sources_sha256: str
    flags: tuple[str, ...] = ()
    compiler: str = "unknown"
    launch_json: str = "{}"  # canonical JSON of the launch configuration
    variant: str = "base"
    params_json: str = "{}"  # canonical JSON of variant parameters (e.g. op_id, iteration)
    base: str | None = None  # id of the base version (variants only)
    parent: str | None = None  # id of the version this one was edited from (lineage)
    warp_roles_json: str = "{}"  # canonical JSON {role: [warp index within a CTA, ...]}
    regions: RegionTree = field(default_factory=RegionTree, compare=False, hash=False, repr=False)
    root: str | None = field(default=None, compare=False, hash=False, repr=False)  # sources dir

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not PROGRAM_NAME.match(self.name):
            raise ProgramError(f"invalid program name {self.name!r}: 1-64 letters, digits, '_', '.' or '-', "
                               "starting with a letter or digit (it becomes part of cache file names)")
        if self.variant not in VARIANTS:
            raise ProgramError(f"unknown program variant {self.variant!r}; valid: {', '.join(VARIANTS)}")
        if self.kind not in kind_names():  # the kinds are argus_rt.kinds.registry's
            raise ProgramError(f"unknown program kind {self.kind!r}; valid: {', '.join(kind_names())}")
        if (self.variant == "base") != (self.base is None):
            raise ProgramError("a base version has no 'base'; a variant must name its base version")
        self.regions.freeze()  # part of the id: the version's content cannot change under it

    # ---- identity -------------------------------------------------------------------------
    @cached_property
    def id(self) -> str:
        """``pv-`` + 16 hex digits of SHA-256 over the version's content. Computed once: every field is
        frozen, and so is the region tree (:meth:`RegionTree.freeze`, in ``__post_init__``)."""
        ident = {
            "kind": self.kind, "sources": self.sources_sha256, "flags": list(self.flags),
            "compiler": self.compiler, "launch": self.launch_json, "variant": self.variant,
            "params": self.params_json, "base": self.base,
            "regions": [[r.name, r.id] for r in self.regions],
        }
        if self.warp_roles_json != "{}":  # only then: versions made before roles existed keep their ids
            ident["warp_roles"] = self.warp_roles_json
        return "pv-" + hashlib.sha256(_canonical(ident).encode()).hexdigest()[:16]

    @property
    def base_id(self) -> str:
        """The version whose variants this belongs to (itself for a base version)."""
        return self.base or self.id

    @property
    def launch(self) -> dict:
        return json.loads(self.launch_json)

    @property
    def params(self) -> dict:
        return json.loads(self.params_json)

    @property
    def warp_roles(self) -> dict[str, list[int]]:
        """The warp roles the program declares: {role: [warp index within a CTA, ...]}."""
        return json.loads(self.warp_roles_json)

    def label(self) -> str:
        extra = f"[{','.join(f'{k}={v}' for k, v in sorted(self.params.items()))}]" if self.params_json != "{}" else ""
        return f"{self.name}:{self.variant}{extra}"

    # ---- making new versions --------------------------------------------------------------
    @classmethod
    def from_sources(cls, name: str, sources: Mapping[str, bytes | str], *, kind: str = "cuda",
                     flags: tuple[str, ...] | list[str] = (), compiler: str = "unknown",
                     launch: dict | None = None, regions: RegionTree | None = None,
                     root: str | None = None, warp_roles: Mapping[str, list[int]] | None = None) -> "ProgramVersion":
        return cls(name=name, kind=kind, sources_sha256=source_digest(sources), flags=tuple(flags),
                   compiler=compiler, launch_json=_canonical(launch or {}),
                   warp_roles_json=_canonical(_sorted_roles(warp_roles)),
                   regions=regions if regions is not None else RegionTree(name), root=root)

    def variant_of(self, variant: str, **params: Any) -> "ProgramVersion":
        """The ``variant`` of this version's base (variants of variants link to the same base)."""
        if variant == "base":
            raise ProgramError("'base' is not a variant; use the base version itself")
        if variant not in VARIANTS:
            raise ProgramError(f"unknown program variant {variant!r}; valid: {', '.join(VARIANTS[1:])}")
        if variant == "probe" and not params:
            raise ProgramError("a probe variant needs parameters (e.g. op_id=..., iteration=...)")
        return replace(self, variant=variant, params_json=_canonical(params), base=self.base_id)

    def derive(self, sources: Mapping[str, bytes | str], *, flags: tuple[str, ...] | None = None,
               regions: RegionTree | None = None) -> "ProgramVersion":
        """A new base version edited from this one (e.g. an optimizer's next candidate)."""
        base = self if self.variant == "base" else None
        return replace(self, sources_sha256=source_digest(sources),
                       flags=tuple(flags) if flags is not None else self.flags, variant="base",
                       params_json="{}", base=None, parent=(base.id if base else self.base_id),
                       regions=regions if regions is not None else self.regions)

    # ---- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {
            "id": self.id, "name": self.name, "kind": self.kind, "sources_sha256": self.sources_sha256,
            "flags": list(self.flags), "compiler": self.compiler, "launch": self.launch,
            "variant": self.variant, "params": self.params, "base": self.base, "parent": self.parent,
            "regions": self.regions.to_manifest(), "root": self.root,
        }
        if self.warp_roles_json != "{}":
            out["warp_roles"] = self.warp_roles
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ProgramVersion":
        pv = cls(name=data["name"], kind=data["kind"], sources_sha256=data["sources_sha256"],
                 flags=tuple(data.get("flags", ())), compiler=data.get("compiler", "unknown"),
                 launch_json=_canonical(data.get("launch", {})), variant=data.get("variant", "base"),
                 params_json=_canonical(data.get("params", {})), base=data.get("base"),
                 parent=data.get("parent"), regions=RegionTree.from_manifest(data["regions"]),
                 root=data.get("root"), warp_roles_json=_canonical(_sorted_roles(data.get("warp_roles"))))
        if "id" in data and data["id"] != pv.id:
            raise ProgramError(f"program record {data['id']!r} does not hash to its id (got {pv.id}); "
                               "it was edited or made by an incompatible Argus")
        return pv


def _sorted_roles(roles: Mapping[str, list[int]] | None) -> dict:
    return {str(name): sorted({int(w) for w in warps}) for name, warps in (roles or {}).items()}


def check_joinable(versions: list[ProgramVersion]) -> None:
    """Raise :class:`IncompatibleVersionsError` unless all versions share one base version."""
    bases = {pv.base_id for pv in versions}
    if len(bases) > 1:
        names = ", ".join(f"{pv.label()} ({pv.id}, base {pv.base_id})" for pv in versions)
        raise IncompatibleVersionsError(
            f"refusing to join evidence across incompatible program versions: {names}; "
            "only variants of one base version can be joined"
        )


def detect_compiler(kind: str) -> str:
    """Version string of the compiler for ``kind`` (its registry ``compiler`` hook; "unknown" when it is
    not installed, "none" for a kind that compiles nothing)."""
    found = find_kind(kind)
    if found is None or found.compiler is None:
        return "none"
    return found.call("compiler")


class UnsafeFlagError(ProgramError):
    """A compiler flag outside the allow-list, in a program loaded without ``allow_unsafe_flags``."""


def load_program(path: str | Path, *, allow_unsafe_flags: bool = False) -> ProgramVersion:
    """Load a program directory (with ``argus_program.json``) or the JSON file itself.

    The file is checked against ``argus_rt/schemas/program.schema.json``, its ``launch`` against the
    schema its kind names (``Kind.launch_schema`` in :mod:`argus_rt.kinds.registry`); a file that breaks them,
    names a missing source or manifest, or is not JSON raises :class:`ProgramError` in one line
    naming the file, the field and what is valid there. Every file it names (sources, regions,
    launch.source, launch.module, the file of launch.reference) must lie inside its directory.
    Compiler ``flags`` outside the allow-list of :func:`argus_rt.nvcc_flags.unsafe_flag`
    (``-ccbin``, ``-Xcompiler``, ...) raise :class:`UnsafeFlagError` unless ``allow_unsafe_flags``.
    """
    from .schema_check import schema_problems, summarize

    path = Path(path)
    spec_path = path / PROGRAM_FILE if path.is_dir() else path
    if not spec_path.is_file():
        raise ProgramError(f"no program description at {spec_path}; a program directory holds {PROGRAM_FILE}")
    root = spec_path.parent
    spec = read_json_file(spec_path, ProgramError, "program description")
    problems = schema_problems("program", spec)
    if problems:
        raise ProgramError(f"{spec_path}: {summarize(problems)}")
    if spec["kind"] not in kind_names():  # the schema says "a string"; the registry says which
        raise ProgramError(f"{spec_path}: kind: {spec['kind']!r} is not a program kind; valid: {', '.join(kind_names())}")
    launch_schema = find_kind(spec["kind"]).launch_schema  # the launch's keys are the kind's
    if launch_schema and (problems := schema_problems(launch_schema, spec["launch"], at=("launch",))):
        raise ProgramError(f"{spec_path}: {summarize(problems)}")
    sources = {rel: _read_source(spec_path, f"sources[{i}]", rel).read_bytes()
               for i, rel in enumerate(spec["sources"])}
    regions_spec = spec["regions"]
    if isinstance(regions_spec, str):
        manifest = _read_source(spec_path, "regions", regions_spec)
        try:
            regions = RegionTree.load(manifest)
        except (RegionError, OSError, ValueError) as exc:
            raise ProgramError(f"{spec_path}: regions: {exc}") from None
    else:
        try:
            regions = RegionTree.from_manifest(regions_spec)
        except RegionError as exc:
            raise ProgramError(f"{spec_path}: regions: {exc}") from None
    _check_launch_paths(spec_path, spec["launch"])
    try:  # what the schema cannot say: no warp in two roles, none past the launch's block
        check_warp_roles(spec.get("warp_roles"), warps_per_cta(spec["launch"]))
    except WarpRoleError as exc:
        raise ProgramError(f"{spec_path}: {exc}") from None
    if not allow_unsafe_flags:
        _check_flags(spec_path, spec.get("flags", ()))
    kind = spec["kind"]
    compiler = spec.get("compiler") or detect_compiler(kind)
    return ProgramVersion.from_sources(spec.get("name") or safe_program_name(root.resolve().name), sources, kind=kind,
                                       flags=tuple(spec.get("flags", ())), compiler=compiler,
                                       launch=spec["launch"], regions=regions, root=str(root),
                                       warp_roles=spec.get("warp_roles"))


def safe_program_name(directory_name: str) -> str:
    """A valid program name from a directory name: other characters become '_' ("program" if none is left)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", directory_name).lstrip("._-")[:64]
    return name if PROGRAM_NAME.match(name) else "program"


def _check_flags(spec_path: Path, flags) -> None:
    problem = unsafe_flag(flags, spec_path.parent)
    if problem is not None:
        raise UnsafeFlagError(f"{spec_path}: {problem} (allowed: {allowed_flag_forms()}); pass "
                              "--allow-unsafe-flags (allow_unsafe_flags=True) to build with it anyway: a program "
                              "directory is code, see docs/programs-security.md")


def _check_launch_paths(spec_path: Path, launch: dict) -> None:
    """Every file ``launch`` names (source, module, the file of reference) lies inside the program directory."""
    for key in LAUNCH_FILE_KEYS:
        if isinstance(launch.get(key), str):
            _read_source(spec_path, f"launch.{key}", launch[key])
    for key in LAUNCH_FILE_FUNCTION_KEYS:
        if isinstance(launch.get(key), str):
            _read_source(spec_path, f"launch.{key}", launch[key].partition(":")[0])


def _read_source(spec_path: Path, field_name: str, rel: str) -> Path:
    """The file ``rel`` that ``field_name`` of ``spec_path`` names, checked to exist inside its directory
    (after resolving symbolic links: a link inside that points outside is refused too)."""
    root, target = program_file(spec_path.parent, rel)
    if not target.is_relative_to(root) or target == root:
        raise ProgramError(f"{spec_path}: {field_name}: {rel!r} lies outside the program directory {root}")
    if not target.is_file():
        what = "is a directory, not a file" if target.is_dir() else "does not exist"
        raise ProgramError(f"{spec_path}: {field_name}: {rel!r} {what} (looked at {target}); paths are relative "
                           f"to the program directory")
    return target


def program_file(program_dir: str | Path, rel: str) -> tuple[Path, Path]:
    """(the directory ``rel`` must stay inside, the resolved file) for a file name of a program:
    relative to ``program_dir``, or to Argus's shipped csrc/ with :data:`SHIPPED_SOURCE_PREFIX`."""
    if rel.startswith(SHIPPED_SOURCE_PREFIX):
        from .resources import csrc_dir

        base, rel = csrc_dir(), rel[len(SHIPPED_SOURCE_PREFIX):]
    else:
        base = Path(program_dir)
    base = base.resolve()
    return base, (base / rel).resolve()
