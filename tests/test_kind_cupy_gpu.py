"""The CuPy program kind on a GPU: ``argus query examples/cupy --signals latency,instruction_mix,barrier_count``.

The example (examples/cupy/row_softmax.cu, one CTA of 4 warps per row, 256 rows) is launched by CuPy
from the cubins Argus built; every collection checks its output, and the trace-free variant's, against
the NumPy reference first. Also: the options CuPy itself passes to NVRTC for the same RawModule are
the ones Argus compiles with, and the machine code is the same.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cupy"
SIGNALS = "latency,instruction_mix,barrier_count"
REGIONS = ["softmax", "softmax/max", "softmax/max/reduce", "softmax/sum", "softmax/sum/reduce", "softmax/normalize"]
WARPS = 256 * 128 // 32  # CTAs x warps per CTA: every warp runs each region once per launch


def _values(report, signal, region=None):
    return [v for v in report["values"] if v["signal"] == signal and (region is None or v["region"] == region)]


@pytest.mark.gpu
def test_query_cupy_example(tmp_path):
    keep = Path(os.environ.get("ARGUS_TEST_ARTIFACTS", tmp_path))
    out = keep / "report_cupy.json"
    cmd = [sys.executable, "-m", "argus_rt.cli", "query", str(EXAMPLE), "--region", "softmax", "--signals", SIGNALS,
           "--workspace", str(tmp_path / "ws"), "--json", str(out), "--markdown", str(keep / "report_cupy.md"),
           "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["unanswered"] == [], report["unanswered"]
    for name in REGIONS:  # observed from the CuPy-launched traced variant, one occurrence per warp
        lat = {v["metric"]: v for v in _values(report, "latency", name)}
        assert lat and all(v["qualification"] == "observed" for v in lat.values()), name
        assert lat["mean"]["value"] > 0 and lat["count"]["value"] % WARPS == 0 < lat["count"]["value"], (name, lat)
    mean = {v["region"]: v["value"] for v in _values(report, "latency") if v["metric"] == "mean"}
    assert mean["softmax"] >= mean["softmax/max"] >= mean["softmax/max/reduce"]
    assert mean["softmax/sum"] >= mean["softmax/sum/reduce"]
    mix = _values(report, "instruction_mix")
    assert mix and all(v["qualification"] == "attributed" for v in mix)
    ops = {(v["region"], v["metric"]): v["value"] for v in mix}
    assert ops[("softmax/sum", "MUFU")] > 0 and ops[("softmax/normalize", "MUFU")] > 0  # expf
    assert ops.get(("softmax/max", "MUFU"), 0) == 0
    bars = _values(report, "barrier_count")
    assert bars and all(v["qualification"] == "attributed" for v in bars)
    bar = {v["region"]: v["value"] for v in bars if v["metric"] == "BAR"}
    for name in ("softmax/max/reduce", "softmax/sum/reduce"):  # two __syncthreads per warp in each
        assert bar[name] == pytest.approx(2 * WARPS, rel=0.02), (name, bar)
    for name in ("softmax", "softmax/max", "softmax/sum", "softmax/normalize"):
        assert bar.get(name, 0) == pytest.approx(0.0, abs=0.5), (name, bar)


@pytest.mark.gpu
def test_the_measured_variants_and_the_trace_free_one_match_the_reference():
    pytest.importorskip("cupy")
    from argus_rt.kinds.cupy.run import run_once
    from argus_rt.program import load_program

    program = load_program(EXAMPLE)
    for variant in ("marker_only", "traced"):
        res = run_once(program, variant, trace_config={"capacity": 256} if variant == "traced" else None)
        check = res["reference_check"]
        assert check["variant"] == variant and check["max_rel_err"] <= check["rtol"], check
        assert check["trace_free"]["max_rel_err"] <= check["rtol"], check
        assert check["trace_free"]["bitwise_equal"], f"{variant}: markers changed the kernel's arithmetic: {check}"
        if variant == "traced":
            rows = res["intervals"].rows
            assert len(rows) == WARPS * len(REGIONS) and not res["intervals"].incomplete


def _described(obj) -> str:
    """What a captured compiler output is: its type, length and first bytes (for failure messages)."""
    size = len(obj) if hasattr(obj, "__len__") else "no"
    head = bytes(obj[:16]) if isinstance(obj, (bytes, bytearray, memoryview)) else repr(obj)[:40]
    return f"{type(obj).__name__} of length {size}, starting {head!r}"


def elf_image_size(data: bytes) -> int:
    """The bytes an ELF64 image spans by its own headers: the end of its program-header table, its
    section-header table and its last section with file contents (what a loader given no size reads)."""
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    ends = [phoff + phnum * phentsize, shoff + shnum * shentsize]
    for i in range(shnum):
        base = shoff + i * shentsize
        if base + 0x28 <= len(data):  # a section header the bytes hold (a short image is measured as it is)
            sh_type, = struct.unpack_from("<I", data, base + 4)
            offset, size = struct.unpack_from("<QQ", data, base + 0x18)
            ends.append(offset + (0 if sh_type == SHT_NOBITS else size))
    return max(ends)


SHT_NOBITS = 8  # a section without file contents (.bss-like): it spans no bytes of the image


@pytest.mark.gpu
def test_argus_compiles_with_the_options_cupy_passes_to_nvrtc(tmp_path, monkeypatch):
    """CuPy's own RawModule compile of the trace-free source (Argus's three options among the user's),
    watched at NVRTC: its option list is Argus's for the arch CuPy picks, and the SASS of the cubin CuPy
    hands the driver is Argus's.

    CuPy 14 compiles ``-arch=sm_<XY>`` to a cubin (``_get_arch_for_options_for_nvrtc`` picks method
    "cubin"; PTX and driver JIT only under ``CUPY_COMPILE_WITH_PTX=1`` or an arch newer than NVRTC
    knows), and ``_NVRTCProgram.compile`` returns ``(nvrtc.getCUBIN(prog), mapping)``; that ``bytes``
    object is what ``Module.load`` passes to ``cuModuleLoadData``. CuPy 14's ``getCUBIN`` drops the
    last byte as a "trailing NULL", which a cubin does not have, so the bytes are one short of the ELF
    image (cuobjdump: "does not contain device code"). ``cuModuleLoadData`` takes no size: the driver
    reads the image to the end its headers declare, and the byte past the object's end is the NUL every
    CPython ``bytes`` ends with. So the image compared is the captured bytes plus that NUL (the last
    byte of the ELF is the top byte of a little-endian 64-bit field of its last header, 0), and only when the
    headers say exactly one byte is missing.
    """
    cupy = pytest.importorskip("cupy")
    from cupy.cuda import compiler

    from argus_rt.kinds.cuda.build import disassemble, sass_lines
    from argus_rt.kinds.cupy.build import build_variant, nvrtc_options
    from argus_rt.program import load_program
    from argus_rt.resources import csrc_dir

    prog_dir = tmp_path / "prog"
    shutil.copytree(EXAMPLE, prog_dir)
    source = (EXAMPLE / "row_softmax.cu").read_text() + f"\n// {uuid.uuid4().hex}: never in CuPy's kernel cache\n"
    (prog_dir / "row_softmax.cu").write_text(source)
    spec = json.loads((prog_dir / "argus_program.json").read_text())
    spec["launch"]["arch"] = f"sm_{compiler._get_arch()}"  # what CuPy compiles for on this GPU (sm_90 on an H200)
    (prog_dir / "argus_program.json").write_text(json.dumps(spec))
    program = load_program(prog_dir)

    seen = []
    real = compiler._NVRTCProgram.compile

    def watched(self, options=(), log_stream=None):
        out = real(self, options, log_stream)
        seen.append((tuple(options), getattr(self, "method", None), out[0]))
        return out

    monkeypatch.setattr(compiler._NVRTCProgram, "compile", watched)
    extra = ("-DARGUS_MODE=0", f"-I{csrc_dir()}", f"-I{prog_dir.resolve()}")
    cupy.RawModule(code=source, options=tuple(program.flags) + extra).get_function("row_softmax")
    compiles = [c for c in seen if any(x.startswith("-arch=sm_") for x in c[0])]  # not the -arch=compute_ preprocess
    assert len(compiles) == 1, [(o, m, _described(b)) for o, m, b in seen]
    options, method, loaded = compiles[0]
    assert list(options) == nvrtc_options(program, "trace_free")
    what = f"CuPy's NVRTC output (method {method!r}): {_described(loaded)}"
    assert method == "cubin" and isinstance(loaded, bytes) and loaded[:4] == b"\x7fELF", what
    declared = elf_image_size(loaded)
    assert declared in (len(loaded), len(loaded) + 1), f"{what}; its ELF headers span {declared} bytes"
    image = loaded + b"\0" * (declared - len(loaded))
    theirs = tmp_path / "cupy.cubin"
    theirs.write_bytes(image)
    ours = build_variant(program, "trace_free")
    their_sass, our_sass = sass_lines(disassemble(theirs)), sass_lines(disassemble(ours))
    assert their_sass, f"{what}: no SASS in it"
    assert their_sass == our_sass, (f"{what}: {len(their_sass)} SASS lines, Argus's {ours} {len(our_sass)}; first "
                                    f"difference: {next((a, b) for a, b in zip(their_sass + [''], our_sass + ['']) if a != b)}")
