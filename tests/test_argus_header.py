"""csrc/argus/argus.cuh, the master header over its parts, does what its top comment says.

- The device example compiles with nvcc in every build mode, and each mode leaves its footprint in
  the PTX (nothing / PMTRIG immediates of the example's IDs / the trace's argus_ctl). Its region IDs
  are the ones RegionTree.cuda_defines() writes.
- The host example names the real API: every call binds to the signature of the function it calls,
  and the TraceConfig it builds is valid.
- A host translation unit (g++) sees the layout, the options, the marker footprint and the buffer
  sizes, which equal argus_rt.trace.layout's; it does not see the device-only marker macros.
"""
from __future__ import annotations

import ast
import inspect
import re
import shutil
import subprocess
import typing
from pathlib import Path

import pytest

from argus_rt import markers
from argus_rt.regions import RegionTree
from argus_rt.trace import layout
from toolchain import NVCC

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
HEADER = CSRC / "argus" / "argus.cuh"


def example(name: str) -> str:
    """The code between ``---- example: <name> ----`` and ``---- end ----`` in the header's top comment."""
    text = HEADER.read_text()
    m = re.search(rf"^ \*\s*---- example: {name} ----\n(.*?)^ \*\s*---- end ----", text, re.M | re.S)
    assert m, f"argus.cuh has no '---- example: {name} ----' block"
    lines = [re.sub(r"^ \* ?", "", line) for line in m.group(1).splitlines()]
    indent = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
    return "\n".join(x[indent:] for x in lines) + "\n"


def _defines(source: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2), 16) for m in re.finditer(r"#define (ARGUS_REGION_\w+) 0x([0-9a-fA-F]+)u", source)}


def test_device_example_ids_are_what_cuda_defines_writes():
    got = _defines(example("device"))
    assert got, "the device example defines no region IDs"
    tree = RegionTree("k")
    for macro in got:
        tree.add(macro.removeprefix("ARGUS_REGION_").lower())
    assert got == _defines(tree.cuda_defines())


@pytest.fixture(scope="module")
def device_ptx(tmp_path_factory) -> dict[str, str]:
    nvcc = NVCC and str(NVCC)
    if nvcc is None:
        pytest.skip("no nvcc where argus_rt.tools looks")
    tmp = tmp_path_factory.mktemp("argus_example")
    src = tmp / "k.cu"
    src.write_text(example("device"))
    out = {}
    for label, defs in {"off": ["-DARGUS_MODE=0"], "marker_only": ["-DARGUS_MODE=1"], "trace": ["-DARGUS_MODE=2"],
                        "trace_anchored": ["-DARGUS_MODE=2", "-DARGUS_TIMESTAMP=ARGUS_TS_ANCHORED"]}.items():
        ptx = tmp / f"{label}.ptx"
        argv = [nvcc, "-ptx", "-arch=sm_90a", "-std=c++17", "-I", str(CSRC), *defs, "-o", str(ptx), str(src)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{label}: {' '.join(argv)}\n{proc.stderr[-3000:]}"
        out[label] = ptx.read_text()
    return out


def test_device_example_compiles_in_every_mode_with_its_footprint(device_ptx):
    ids = _defines(example("device"))
    assert "pmevent" not in device_ptx["off"] and "argus_ctl" not in device_ptx["off"]
    immediates = {int(x) for x in re.findall(r"pmevent\.mask\s+(\d+);", device_ptx["marker_only"])}
    want = {markers.MARKER_TAG | markers.MARKER_BEGIN, markers.MARKER_TAG | markers.MARKER_END}
    for rid in ids.values():
        want |= {rid & 0xFFFF, rid >> 16}
    assert immediates == want
    for label in ("trace", "trace_anchored"):
        assert "argus_ctl" in device_ptx[label] and "pmevent" not in device_ptx[label]
        assert "%globaltimer" in device_ptx[label]
    assert "argus_ts_anchored" in device_ptx["trace_anchored"] and "argus_ts_anchored" not in device_ptx["trace"]


def _return_class(fn, module_globals: dict):
    hints = typing.get_type_hints(fn, globalns=getattr(fn, "__globals__", module_globals))
    ret = hints.get("return")
    if isinstance(ret, str):  # a quoted forward reference inside a string annotation
        ret = getattr(fn, "__globals__", module_globals).get(ret.strip("'\""))
    return ret if inspect.isclass(ret) else None


def test_host_example_calls_bind_to_the_real_api():
    tree = ast.parse(example("host"))
    names: dict[str, object] = {}
    for node in tree.body:  # the example's imports, for real
        if isinstance(node, ast.ImportFrom):
            module = __import__(node.module, fromlist=[a.name for a in node.names])
            names.update({a.asname or a.name: getattr(module, a.name) for a in node.names})
    types: dict[str, type] = {}  # variable -> class of the value the example assigns to it

    def resolve(func: ast.expr):
        if isinstance(func, ast.Name):
            return names[func.id]
        assert isinstance(func, ast.Attribute), ast.unparse(func)
        if isinstance(func.value, ast.Name) and func.value.id in types:  # a method of an instance
            return getattr(types[func.value.id], func.attr), True
        return getattr(resolve(func.value), func.attr)

    def check(call: ast.Call):
        target = resolve(call.func)
        fn, needs_self = target if isinstance(target, tuple) else (target, False)
        args = [object()] * (len(call.args) + needs_self)
        kwargs = {k.arg: object() for k in call.keywords}
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise AssertionError(f"argus.cuh host example: {ast.unparse(call)}: {exc}") from None
        if inspect.isclass(fn) and all(isinstance(a, ast.Constant) for a in call.args) and \
                all(isinstance(k.value, ast.Constant) for k in call.keywords):
            fn(*[a.value for a in call.args], **{k.arg: k.value.value for k in call.keywords})  # validates
        return fn

    checked = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            continue
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
        for call in calls:
            check(call)
            checked += 1
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            fn = resolve(node.value.func)
            fn = fn[0] if isinstance(fn, tuple) else fn
            cls = fn if inspect.isclass(fn) else _return_class(fn, names)
            if cls is not None:
                types[node.targets[0].id] = cls
    assert checked >= 7 and set(types) >= {"mod", "sess", "trace"}


def test_a_host_unit_sees_layout_options_and_buffer_sizes_not_markers(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler on PATH")
    cases = [(1, 16, 0), (3, 256, 0), (5, 1024, 1), (128, 4096, 1)]
    body = [f'  std::printf("%llu %llu\\n", argus_ring_stride_bytes({c}u, {a}), argus_buffer_bytes({n}u, {c}u, {a}));'
            for n, c, a in cases]
    src = tmp_path / "host.cpp"
    src.write_text("#include <cstdio>\n#include \"argus/argus.cuh\"\nint main() {\n"
                   '  std::printf("%d %d %u\\n", ARGUS_MODE, ARGUS_TIMESTAMP, ARGUS_LAYOUT_VERSION);\n'
                   "#ifdef ARGUS_BEGIN\n  std::printf(\"markers\\n\");\n#else\n  std::printf(\"no markers\\n\");\n#endif\n"
                   + "\n".join(body) + "\n  return 0;\n}\n")
    exe = tmp_path / "host"
    subprocess.run([cxx, "-std=c++17", "-I", str(CSRC), "-o", str(exe), str(src)], check=True, timeout=120)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    assert lines[0] == f"0 0 {layout.LAYOUT_VERSION}"  # defaults: markers off, globaltimer stamps
    assert lines[1] == "no markers"  # the marker macros are device code
    for (n, c, a), line in zip(cases, lines[2:]):
        mode = layout.CLOCK_ANCHORED if a else layout.CLOCK_GLOBALTIMER
        assert line == f"{layout.ring_stride(c, mode)} {layout.buffer_bytes(n, c, mode)}", (n, c, a)
