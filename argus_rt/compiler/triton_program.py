"""The TTGIR of a ``kind="triton"`` program: import its kernel module, unwrap decorators, compile on the CPU.

The program's ``launch`` names the kernel: ``{"module": "tma_matmul.py", "kernel":
"tma_matmul_kernel", "signature": {...}, "constexprs": {...}, "num_stages": 3, "num_warps": 4,
"iterations": 8, "capability": 90}``.

Users decorate kernels with ``@triton.autotune`` and ``@triton.heuristics``; those wrappers keep
the ``@triton.jit`` function in ``.fn``. An autotuned kernel's compile options depend on the config
the autotuner picks, so the launch must name one: its ``constexprs`` (with ``num_warps`` and
``num_stages``) must equal one of the kernel's configs, else :class:`KernelConfigError` lists them.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import ArgusInputError

_LAUNCH_KEYS = ("module", "kernel", "signature", "constexprs", "num_stages", "num_warps", "iterations",
                "capability", "grid", "shapes")
_TTGIR_CACHE: dict[str, tuple[str, int]] = {}


class KernelConfigError(ArgusInputError):
    """A launch that does not say which compiled kernel it means (a missing or unknown autotune config)."""


def _config_text(cfg) -> str:
    items = dict(cfg.kwargs)
    items.update(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return "{" + ", ".join(f"{k}: {v}" for k, v in items.items()) + "}"


def unwrap_kernel(obj, launch: dict, where: str):
    """The ``@triton.jit`` function under autotune/heuristics wrappers; checks an autotuned kernel's
    launch names one of its configs (constexprs + num_warps + num_stages)."""
    from triton.runtime.jit import JITFunction

    seen = 0
    fn = obj
    while not isinstance(fn, JITFunction):
        configs = getattr(fn, "configs", None)
        if configs is not None:
            _check_config(configs, launch, where)
        values = getattr(fn, "values", None)  # @triton.heuristics: {constexpr name: lambda args: value}
        if isinstance(values, dict):
            missing = sorted(set(values) - set(launch.get("constexprs", {})))
            if missing:
                raise KernelConfigError(f"{where}: @triton.heuristics computes {missing} from the arguments; give "
                                        f"their values in launch.constexprs")
        inner = getattr(fn, "fn", None)
        if inner is None or seen > 8:
            raise KernelConfigError(f"{where} is a {type(obj).__name__!r} object, not a @triton.jit function (or an autotuned "
                                    "/ heuristics wrapper of one)")
        fn, seen = inner, seen + 1
    return fn


def _check_config(configs, launch: dict, where: str) -> None:
    constexprs = launch.get("constexprs", {})
    for cfg in configs:
        if all(constexprs.get(k) == v for k, v in cfg.kwargs.items()) and \
                launch.get("num_warps", 4) == cfg.num_warps and launch.get("num_stages", 3) == cfg.num_stages:
            return
    listed = "; ".join(f"{i}: {_config_text(c)}" for i, c in enumerate(configs))
    raise KernelConfigError(f"{where} is @triton.autotune'd over {len(configs)} configs and the launch names none of "
                            f"them; set launch.constexprs, num_warps and num_stages to one of: {listed}")


def load_kernel(program):
    """(kernel module, @triton.jit function) of a triton program, checked against its launch."""
    launch = program.launch
    path = Path(program.root) / launch["module"]
    spec = importlib.util.spec_from_file_location(f"argus_triton_{program.id.replace('-', '_')}", path)
    if spec is None or spec.loader is None:
        raise ArgusInputError(f"cannot import the kernel module {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    obj = getattr(mod, launch["kernel"], None)
    if obj is None:
        raise ArgusInputError(f"{path} has no kernel {launch['kernel']!r}")
    return mod, unwrap_kernel(obj, launch, f"kernel {launch['kernel']!r} of {path.name}")


def program_ttgir(program) -> tuple[str, int]:
    """(TTGIR text, logical loop iterations) of a ``kind="triton"`` :class:`ProgramVersion`,
    compiled for ``cuda:<capability>`` on the CPU. Compiled once per program id and process."""
    cached = _TTGIR_CACHE.get(program.id)
    if cached:
        return cached
    import triton
    from triton.backends.compiler import GPUTarget

    from .async_sites import DiscoveryError

    if program.kind != "triton":
        raise DiscoveryError(f"program {program.label()} has kind {program.kind!r}; TTGIR discovery needs 'triton'")
    launch = program.launch
    missing = [k for k in ("module", "kernel", "signature", "iterations") if k not in launch]
    if missing or program.root is None:
        raise DiscoveryError(f"program {program.label()}: launch needs {missing or 'a source root'}; "
                             f"valid keys: {', '.join(_LAUNCH_KEYS)}")
    _mod, fn = load_kernel(program)
    src = triton.compiler.ASTSource(fn=fn, signature=launch["signature"], constexprs=launch.get("constexprs", {}))
    compiled = triton.compile(src, target=GPUTarget("cuda", int(launch.get("capability", 90)), 32),
                              options={"num_stages": launch.get("num_stages", 3),
                                       "num_warps": launch.get("num_warps", 4)})
    result = (compiled.asm["ttgir"], int(launch["iterations"]))
    _TTGIR_CACHE[program.id] = result
    return result
