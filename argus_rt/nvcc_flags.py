"""Which nvcc flags a program description may carry without ``--allow-unsafe-flags``.

Checked when a program is loaded (:func:`argus_rt.program.load_program`), before anything is built, so
it sits below both the program model and the CUDA build.
"""
from __future__ import annotations

import re
from pathlib import Path

# nvcc flags a program description may ask for without --allow-unsafe-flags: they change code
# generation only. Anything else (-ccbin, -Xcompiler, -o, -include, @file, ...) can run or read
# other programs and files. Each entry: (pattern of one flag item, takes the next item as its value).
_ARCH = r"(sm|compute|lto)_[0-9]{2,3}[af]?"
_SAFE_FLAGS = {
    "-O0..-O3": (r"-O[0-3]", False),
    "-lineinfo": (r"-lineinfo|--generate-line-info", False),
    "-G, -g": (r"-G|-g|--device-debug|--debug", False),
    "-DNAME[=VALUE]": (r"-D[A-Za-z_][A-Za-z0-9_]*(=[^\s]*)?", False),
    "-I<dir inside the program directory>": (r"-I.+", False),
    "-arch=sm_XX": (rf"(-arch|--gpu-architecture)=({_ARCH}|native)", False),
    "-code=sm_XX": (rf"(-code|--gpu-code)={_ARCH}(,{_ARCH})*", False),
    "-gencode=arch=compute_XX,code=sm_XX": (rf"(-gencode|--generate-code)=arch={_ARCH},code=\[?{_ARCH}(,{_ARCH})*\]?",
                                            False),
    "--use_fast_math": (r"-?-use_fast_math", False),
    "-Xptxas -v|-O<n>|--warn-on-spills": (r"-Xptxas", True),
    "-maxrregcount=N": (r"-?-maxrregcount=[0-9]{1,3}", False),
    "-std=c++NN": (r"-std=c\+\+(11|14|17|20)", False),
    "--ftz/--prec-div/--prec-sqrt/--fmad=true|false": (r"--(ftz|prec-div|prec-sqrt|fmad)=(true|false)", False),
    "--expt-relaxed-constexpr, --extended-lambda": (r"--expt-relaxed-constexpr|--expt-extended-lambda|"
                                                    r"--extended-lambda", False),
    "-w, -Wno-deprecated-gpu-targets": (r"-w|-Wno-deprecated-gpu-targets", False),
}
_PTXAS_OPTIONS = re.compile(r"(-v|--verbose|-O[0-3]|--warn-on-spills|-warn-spills|--warn-on-local-memory-usage|"
                            r"-warn-lmem-usage)(,(-v|--verbose|-O[0-3]|--warn-on-spills|-warn-spills|"
                            r"--warn-on-local-memory-usage|-warn-lmem-usage))*")


def unsafe_flag(flags, program_dir: Path) -> str | None:
    """The first of ``flags`` outside the allow-list, described in one phrase (None: all are allowed).

    ``-I`` directories must lie inside ``program_dir`` (after resolving symbolic links)."""
    root = Path(program_dir).resolve()
    items = list(flags)
    i = 0
    while i < len(items):
        flag = items[i]
        form = next((f for f, (pattern, _) in _SAFE_FLAGS.items() if isinstance(flag, str)
                     and re.fullmatch(pattern, flag)), None)
        if form is None:
            return f"flags[{i}] {flag!r} is not an allowed compiler flag"
        if flag.startswith("-I"):
            target = (root / flag[2:]).resolve()
            if not target.is_relative_to(root):
                return f"flags[{i}] {flag!r} names an include directory outside the program directory {root}"
        if _SAFE_FLAGS[form][1]:  # -Xptxas VALUE
            value = items[i + 1] if i + 1 < len(items) else None
            if not isinstance(value, str) or not _PTXAS_OPTIONS.fullmatch(value):
                return f"flags[{i}] {flag!r} {value!r}: ptxas options allowed are -v, -O0..-O3, --warn-on-spills"
            i += 1
        i += 1
    return None


def allowed_flag_forms() -> str:
    """The allow-list in words, for error messages and docs."""
    return ", ".join(_SAFE_FLAGS)
