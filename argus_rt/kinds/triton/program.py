"""The compiled kernel of a ``kind="triton"`` program: the one Triton's JIT would run for its launch.

The program's ``launch`` names the kernel and describes one launch of it::

    "launch": {"module": "matmul.py", "kernel": "matmul_kernel",
               "args": {"a_ptr": {"tensor": "float16", "shape": ["M", "K"]},   # dims: ints or shapes names
                        "M": 2048, "stride_am": 1024, "eps": 1e-5},             # scalars by value
               "constexprs": {"BM": 128}, "num_warps": 8, "num_stages": 3,
               "config": 0,                  # autotuned kernels: a config index, or {kwarg: value}
               "iterations": 16, "capability": 90, "shapes": {"M": 2048, "K": 1024}}

``args`` gives every non-constexpr parameter, as the user's call passes it: the JIT specialises on
those values (a pointer or integer divisible by 16 gets ``tt.divisibility``, an integer 1 becomes a
constexpr), and :mod:`argus_rt.kinds.triton.specialization` runs Triton's own rules on them. A
tensor's ``align`` (bytes, default 256: a torch allocation) says how its address is aligned.

``@triton.autotune`` and ``@triton.heuristics`` wrappers are applied as Triton applies them, outermost
first: an autotuned kernel runs the config ``launch.config`` names (its ``all_kwargs()`` are passed,
as the autotuner passes the config it picked), and a heuristic computes its constexpr from the
arguments unless ``launch.constexprs`` gives it. :func:`config_programs` makes one program per
autotune config, to measure each. Every variant (marker-only, traced, probe) is derived from
:func:`program_compiled`'s TTGIR.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from ...errors import ArgusInputError

_LAUNCH_KEYS = ("module", "kernel", "args", "config", "signature", "constexprs", "num_stages", "num_warps",
                "iterations", "capability", "shapes", "rtol", "atol", "argv", "python")
_COMPILED_CACHE: dict[str, object] = {}


class KernelConfigError(ArgusInputError):
    """A launch that does not say which compiled kernel it means (a missing or unknown autotune config)."""


class TritonProgramError(ArgusInputError):
    """A Triton program whose kernel cannot be imported, specialised or compiled; one line, at plan time."""


def _config_text(cfg) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in cfg.all_kwargs().items()) + "}"


def _configs_listed(configs) -> str:
    return "; ".join(f"{i}: {_config_text(c)}" for i, c in enumerate(configs))


def _pick_config(configs, launch: dict, where: str):
    """The autotune config the launch names: ``config`` (index or kwargs), else the one whose
    kwargs, num_warps and num_stages equal the launch's constexprs, num_warps and num_stages."""
    want = launch.get("config")
    if isinstance(want, int) and not isinstance(want, bool):
        if 0 <= want < len(configs):
            return configs[want]
        raise KernelConfigError(f"{where}: launch.config {want} is out of range; configs: {_configs_listed(configs)}")
    if isinstance(want, dict):
        hits = [c for c in configs if all(c.all_kwargs().get(k) == v for k, v in want.items())]
        if len(hits) == 1:
            return hits[0]
        raise KernelConfigError(f"{where}: launch.config {json.dumps(want)} matches {len(hits)} configs, not one; "
                                f"configs: {_configs_listed(configs)}")
    if want is not None:
        raise KernelConfigError(f"{where}: launch.config {want!r} must be a config index or an object of config "
                                f"kwargs; configs: {_configs_listed(configs)}")
    constexprs = launch.get("constexprs", {})
    for cfg in configs:
        if all(constexprs.get(k) == v for k, v in cfg.kwargs.items()) and \
                launch.get("num_warps", cfg.num_warps) == cfg.num_warps and \
                launch.get("num_stages", cfg.num_stages) == cfg.num_stages:
            return cfg
    raise KernelConfigError(f"{where} is @triton.autotune'd over {len(configs)} configs and the launch names none of "
                            f"them; set launch.config to an index or kwargs of one of: {_configs_listed(configs)}")


def _merge_config(kwargs: dict, cfg, where: str) -> None:
    for k, v in cfg.all_kwargs().items():
        if k in kwargs and kwargs[k] != v:
            raise KernelConfigError(f"{where}: launch gives {k}={kwargs[k]!r} but the chosen autotune config has "
                                    f"{k}={v!r}; drop it from the launch or pick another config")
        kwargs[k] = v


def unwrap_kernel(obj, launch: dict, where: str, args: dict | None = None):
    """(``@triton.jit`` function, launch kwargs) under autotune/heuristics wrappers, applied outermost
    first as Triton's launch applies them: the kwargs are the launch's constexprs, num_warps and
    num_stages, the chosen config's ``all_kwargs()`` and the heuristics' values."""
    from triton.runtime.jit import JITFunction

    kwargs = dict(launch.get("constexprs", {}))
    for key in ("num_warps", "num_stages"):
        if key in launch:
            kwargs[key] = launch[key]
    fn, depth, tuned = obj, 0, False
    while not isinstance(fn, JITFunction):
        configs = getattr(fn, "configs", None)
        if configs is not None:
            _merge_config(kwargs, _pick_config(configs, launch, where), where)
            tuned = True
        values = getattr(fn, "values", None)  # @triton.heuristics: {constexpr name: lambda named args: value}
        if isinstance(values, dict):
            for name, heur in values.items():
                if name in kwargs:
                    continue
                if args is None:
                    raise KernelConfigError(f"{where}: @triton.heuristics computes {name!r} from the arguments; "
                                            "give launch.args (or its value in launch.constexprs)")
                try:
                    kwargs[name] = heur({**args, **kwargs})
                except Exception as exc:  # the user's lambda on stand-in arguments
                    raise KernelConfigError(f"{where}: @triton.heuristics for {name!r} failed on the launch's "
                                            f"arguments ({type(exc).__name__}: {exc}); give {name} in "
                                            "launch.constexprs") from None
        inner = getattr(fn, "fn", None)
        if inner is None or depth > 8:
            raise KernelConfigError(f"{where} is a {type(obj).__name__!r} object, not a @triton.jit function (or an "
                                    "autotuned / heuristics wrapper of one)")
        fn, depth = inner, depth + 1
    if "config" in launch and not tuned:
        raise KernelConfigError(f"{where} is not @triton.autotune'd; launch.config {launch['config']!r} names nothing")
    return fn, kwargs


def import_module(program):
    """The kernel module of a triton program (its ``launch.module``), imported fresh."""
    launch = program.launch
    if program.root is None or "module" not in launch:
        raise TritonProgramError(f"program {program.label()}: a Triton launch needs a source root and launch.module")
    root = Path(program.root).resolve()
    path = (root / launch["module"]).resolve()
    if root not in path.parents or not path.is_file():
        raise TritonProgramError(f"Triton module {launch['module']!r} not found under {root}")
    spec = importlib.util.spec_from_file_location(f"argus_triton_{program.id.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise TritonProgramError(f"cannot import the kernel module {path}")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # the user's module: say which file and what, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise TritonProgramError(f"importing {path.name} failed: {type(exc).__name__}: {first}") from None
    return mod


def launch_arguments(program, fn) -> dict:
    """launch.args as the JIT sees them: :class:`TensorArg` stand-ins and Python scalars, checked
    against ``fn``'s non-constexpr parameters."""
    from .specialization import LaunchArgumentError, tensor_arg

    launch = program.launch
    described = launch.get("args")
    needed = [p.name for p in fn.params if not p.is_constexpr and not p.has_default]
    if not isinstance(described, dict):
        raise LaunchArgumentError(
            f"program {program.label()}: launch.args is missing; Argus compiles the kernel the JIT runs, which "
            f"depends on the arguments: give {{name: value or {{\"tensor\": dtype, \"shape\": [...]}}}} for "
            f"{', '.join(needed)}")
    shapes = launch.get("shapes", {})
    out = {}
    for name, spec in described.items():
        if isinstance(spec, dict):
            if set(spec) - {"tensor", "shape", "align"} or "tensor" not in spec:
                raise LaunchArgumentError(f"launch.args.{name}: {spec!r} must be {{\"tensor\": dtype, \"shape\": "
                                          "[dims], \"align\": bytes (optional)}")
            dims = []
            for d in spec.get("shape", [1]):
                if isinstance(d, str) and d in shapes:
                    d = shapes[d]
                if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                    raise LaunchArgumentError(f"launch.args.{name}.shape: {d!r} is not an int or a name in "
                                              f"launch.shapes ({', '.join(shapes) or 'none'})")
                dims.append(d)
            out[name] = tensor_arg(spec["tensor"], dims, spec.get("align", 256))
        elif isinstance(spec, (bool, int, float)):
            out[name] = spec
        else:
            raise LaunchArgumentError(f"launch.args.{name}: {spec!r} is not a tensor description, an int, a float "
                                      "or a bool")
    constexpr_names = {p.name for p in fn.params if p.is_constexpr}
    clash = sorted(set(out) & constexpr_names)
    missing = [n for n in needed if n not in out]
    if clash or missing:
        raise LaunchArgumentError(f"program {program.label()}: launch.args " +
                                  (f"gives constexpr(s) {clash} (put them in launch.constexprs)" if clash else
                                   f"lacks {missing}") + f"; non-constexpr parameters: {', '.join(needed)}")
    return out


def load_kernel(program, mod=None):
    """(kernel module, @triton.jit function, JIT arguments, launch kwargs) of a triton program; ``mod``,
    where given, is the program's kernel module already imported (:func:`import_module`), not imported again."""
    launch = program.launch
    bad = sorted(set(launch) - set(_LAUNCH_KEYS))
    if bad:
        raise TritonProgramError(f"program {program.label()}: unknown launch key(s) {bad}; "
                                 f"valid: {', '.join(_LAUNCH_KEYS)}")
    if "kernel" not in launch:
        raise TritonProgramError(f"program {program.label()}: launch.kernel is missing")
    if mod is None:
        mod = import_module(program)
    obj = getattr(mod, launch["kernel"], None)
    if obj is None:
        raise TritonProgramError(f"{launch['module']} has no kernel {launch['kernel']!r}")
    where = f"kernel {launch['kernel']!r} of {launch['module']}"
    inner = obj
    while not hasattr(inner, "params") and getattr(inner, "fn", None) is not None:
        inner = inner.fn
    args = launch_arguments(program, inner) if hasattr(inner, "params") else None
    fn, kwargs = unwrap_kernel(obj, launch, where, args)
    _check_signature(program, fn, args, kwargs)
    return mod, fn, args, kwargs


def target_of(program):
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", int(program.launch.get("capability", 90)), 32)


def _check_signature(program, fn, args: dict, kwargs: dict) -> None:
    """A launch.signature, where given, must agree with the types the JIT derives from launch.args."""
    declared = program.launch.get("signature")
    if not declared:
        return
    from .specialization import specialize

    _o, signature, _c, _a = specialize(fn, args, kwargs, target_of(program))
    diff = {k: (v, signature.get(k)) for k, v in declared.items() if signature.get(k) not in (v, "constexpr")}
    if diff:
        shown = ", ".join(f"{k}: declared {a!r}, args give {b!r}" for k, (a, b) in sorted(diff.items()))
        raise TritonProgramError(f"program {program.label()}: launch.signature disagrees with launch.args ({shown})")


def program_compiled(program):
    """The ``CompiledKernel`` Triton's JIT builds for the program's launch, for ``cuda:<capability>``,
    built on the CPU; once per program id and process (and in Triton's on-disk cache)."""
    from .specialization import jit_compile

    if program.kind != "triton":
        raise TritonProgramError(f"program {program.label()} has kind {program.kind!r}; "
                                 "a Triton compile needs 'triton'")
    cached = _COMPILED_CACHE.get(program.id)
    if cached is not None:
        return cached
    _mod, fn, args, kwargs = load_kernel(program)
    try:
        compiled = jit_compile(fn, args, kwargs, target_of(program))
    except ArgusInputError:
        raise
    except Exception as exc:  # Triton's CompilationError is multi-line: keep the line that says what
        raise TritonProgramError(f"compiling {program.launch['kernel']!r} of {program.label()} failed: "
                                 f"{type(exc).__name__}: {_one_line(exc)}") from None
    _COMPILED_CACHE[program.id] = compiled
    return compiled


def _one_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not set(ln.strip()) <= {"^", "~", " "}]
    return lines[-1] if lines else ""


def program_ttgir(program) -> tuple[str, int]:
    """(TTGIR text, logical loop iterations) of a ``kind="triton"`` program: the JIT kernel's TTGIR."""
    from .async_sites import DiscoveryError

    if program.kind != "triton":
        raise DiscoveryError(f"program {program.label()} has kind {program.kind!r}; TTGIR discovery needs 'triton'")
    if "iterations" not in program.launch:
        raise DiscoveryError(f"program {program.label()}: launch needs 'iterations' (the logical loop trips); "
                             f"valid keys: {', '.join(_LAUNCH_KEYS)}")
    return program_compiled(program).asm["ttgir"], int(program.launch["iterations"])


def ttgir_hash(ttgir: str) -> str:
    return hashlib.sha256(ttgir.encode("utf-8")).hexdigest()


def check_program(program, *, use_cache: bool = True) -> str:
    """Plan-time check of a Triton program: import, specialise, compile and parse its TTGIR on the CPU.
    Returns the TTGIR hash; raises :class:`TritonProgramError` (or another one-line
    :class:`ArgusInputError`) on any failure. A passed check is remembered under the Argus cache by
    program id (sources, launch and Triton version), so planning the same program again compiles nothing."""
    from ...build_cache import cache_dir
    from ...fsutil import atomic_write_text
    from .ttgir_module import parse_module

    marker = cache_dir() / "triton_checks" / f"{program.id}.json"
    if use_cache and marker.is_file():
        try:
            return json.loads(marker.read_text(encoding="utf-8"))["ttgir_sha256"]
        except (ValueError, KeyError):
            pass  # a damaged marker: check again
    ttgir = program_compiled(program).asm["ttgir"]
    try:
        parse_module(ttgir)
    except Exception as exc:
        raise TritonProgramError(f"the TTGIR of {program.label()} does not parse: {type(exc).__name__}: "
                                 f"{_one_line(exc)}") from None
    digest = ttgir_hash(ttgir)
    if use_cache:
        marker.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(marker, json.dumps({"program": program.id, "ttgir_sha256": digest}) + "\n")
    return digest


def autotune_configs(program) -> list[dict]:
    """Each autotune config of the program's kernel (``all_kwargs()``), in order; [] if not autotuned."""
    mod = import_module(program)
    obj = getattr(mod, program.launch["kernel"], None)
    while obj is not None and getattr(obj, "configs", None) is None:
        obj = getattr(obj, "fn", None)
    return [] if obj is None else [dict(c.all_kwargs()) for c in obj.configs]


def config_programs(program) -> list:
    """One program version per autotune config (``launch.config`` = its index), to measure each."""
    import dataclasses

    out = []
    for i in range(len(autotune_configs(program))):
        launch = dict(program.launch, config=i)
        out.append(dataclasses.replace(program, launch_json=json.dumps(launch, sort_keys=True, separators=(",", ":"))))
    return out


def compile_program_file(path, **launch_overrides):
    """The JIT's ``CompiledKernel`` for the program file at ``path`` (``argus_program.json``), with
    launch keys overridden (``num_stages=4``, ``config=2``, ``capability=90``); what a kernel module's
    own ``compile_reference`` calls, so the module and its program describe one kernel."""
    import dataclasses

    from ...program import load_program

    program = load_program(path)
    if launch_overrides:
        launch = dict(program.launch, **launch_overrides)
        program = dataclasses.replace(program, launch_json=json.dumps(launch, sort_keys=True, separators=(",", ":")))
    return program_compiled(program)


def module_compiler(module_file, default_num_stages: int):
    """A kernel module's ``compile_reference(capability=90, num_stages=...)``: the JIT's kernel for
    the ``argus_program.json`` beside ``module_file``, so module and program describe one kernel."""
    path = Path(module_file).with_name("argus_program.json")

    def compile_reference(capability: int = 90, num_stages: int = default_num_stages):
        return compile_program_file(path, capability=capability, num_stages=num_stages)

    return compile_reference


def warm_up() -> bool:
    """The kind's ``warm_up`` hook: import Triton (a Triton program's build and run import it); False
    when it is not installed."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def compiler_version() -> str:
    """``"triton <version>"``, "unknown" when Triton is not installed (the kind's ``compiler`` hook)."""
    try:
        import triton
    except ImportError:
        return "unknown"
    return f"triton {triton.__version__}"
