"""The kernels the client tunes: their configuration spaces, shapes, and how a candidate becomes a fork.

A candidate is one configuration (a value per knob) at one shape. ``fork(program, edits, launch)``
makes it a program version: ``launch`` sets the constexprs, ``num_warps``, ``num_stages``, the scalar
arguments, ``shapes`` and ``iterations``, so Argus compiles the kernel the candidate describes; the
``edits`` entry rewrites the kernel module, because the module's ``make_inputs`` / ``run`` size the
inputs and the grid from its own constants (``M, N, K``, ``BLOCK_M``, ...). The edit appends one
block that reassigns those constants (functions read module globals when called, so every later use
sees the candidate's values) and, for warp specialisation, turns the K loop into
``tl.range(..., warp_specialize=True)``. Both come from one configuration and shape here, so they
agree (tests/test_agent_client.py checks it). Argus's JIT check would refuse a fork whose launch
compiles to another kernel than the module's launch (TTGIR hash); a scalar that differs without
changing the TTGIR it would not see.

Shapes: each kernel lists four; ``split_shapes`` keeps the even-numbered ones for tuning and holds
out the odd-numbered ones (the policies never see those).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OVERRIDE_HEADER = "# ---- agent_client candidate: these assignments override the constants above ----"


class KernelSpecError(ValueError):
    """A kernel name, shape count or configuration the client does not know."""


@dataclass(frozen=True)
class Knob:
    """One tunable: its name and its values in order (a move is one step along this list)."""

    name: str
    values: tuple

    def index(self, value) -> int:
        if value not in self.values:
            raise KernelSpecError(f"knob {self.name}: value {value!r} not in {list(self.values)}")
        return self.values.index(value)


@dataclass(frozen=True)
class KernelSpec:
    """A Triton program of the repository and what the client may change about it."""

    name: str
    program_dir: Path
    module: str                    # the kernel module, relative to program_dir
    root_region: str
    knobs: tuple[Knob, ...]
    shapes: tuple[dict, ...]       # named dimensions, e.g. {"M": 2048, "N": 2048, "K": 512}
    # bottleneck class -> knob moves to try first, (knob, +1 / -1), for the region-evidence policy
    remedies: dict = field(default_factory=dict)
    # another start than the program's own launch (knob -> value), for a search from an untuned point
    start_overrides: dict = field(default_factory=dict)
    family: str = ""               # the kernel whose validity and candidate rules apply ("" = name)

    @property
    def rules(self) -> str:
        """The kernel whose validity, candidate and warp-specialisation rules apply: its family, or itself."""
        return self.family or self.name

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KernelSpecError(f"kernel {self.name}: knob {name!r} unknown; valid: {', '.join(k.name for k in self.knobs)}")

    def base_launch(self) -> dict:
        return json.loads((self.program_dir / "argus_program.json").read_text(encoding="utf-8"))["launch"]

    @property
    def start(self) -> dict:
        """The program's own configuration (its argus_program.json launch): the speedup baseline.
        A knob the launch does not set (warp_specialize) starts at its first value."""
        launch = self.base_launch()
        config = {}
        for k in self.knobs:
            value = launch.get("constexprs", {}).get(k.name, launch.get(k.name, k.values[0]))
            value = self.start_overrides.get(k.name, value)
            k.index(value)
            config[k.name] = value
        return config

    def module_text(self) -> str:
        return (self.program_dir / self.module).read_text(encoding="utf-8")

    def valid(self, config: dict, shape: dict) -> str | None:
        """Why ``config`` cannot run at ``shape`` without going out of bounds (None: it can)."""
        return _VALIDITY[self.rules](config, shape)

    def candidate(self, config: dict, shape: dict, base_launch: dict) -> tuple[dict, dict]:
        """(edits, launch) for ``fork``: the module with the candidate's constants, and the launch keys."""
        for k in self.knobs:
            k.index(config[k.name])
        constants, launch = _CANDIDATES[self.rules](config, shape, base_launch)
        text = self.module_text()
        if config.get("warp_specialize"):
            text = _warp_specialised(text, self.rules)
        block = "\n".join(f"{name} = {value!r}" for name, value in constants.items())
        return {self.module: f"{text.rstrip()}\n\n\n{OVERRIDE_HEADER}\n{block}\n"}, launch


def shape_label(shape: dict) -> str:
    return "x".join(f"{k}{v}" for k, v in shape.items())


def split_shapes(spec: KernelSpec, count: int) -> tuple[list[dict], list[dict]]:
    """(tuning, held-out) among the first ``count`` shapes: even positions tune, odd ones are held out."""
    if not 2 <= count <= len(spec.shapes):
        raise KernelSpecError(f"--shapes {count}: kernel {spec.name} has {len(spec.shapes)} shapes; valid: 2..{len(spec.shapes)}")
    chosen = list(spec.shapes[:count])
    return chosen[0::2], chosen[1::2]


# ---- the TMA matmul (examples/triton) -----------------------------------------------------------
_WS_LOOP = ("    for k in range(0, K, BK):\n", "    for k in tl.range(0, K, BK, warp_specialize=True):\n")


def _warp_specialised(text: str, kernel: str) -> str:
    old, new = _WS_LOOP
    if kernel != "tma_matmul" or text.count(old) != 1:
        raise KernelSpecError(f"kernel {kernel}: warp specialisation needs exactly one line {old.strip()!r}")
    return text.replace(old, new)


def _matmul_valid(config: dict, shape: dict) -> str | None:
    for dim, tile in (("M", "BM"), ("N", "BN"), ("K", "BK")):
        if shape[dim] % config[tile]:
            return f"{dim}={shape[dim]} is not a multiple of {tile}={config[tile]} (the kernel stores unmasked)"
    return None


def _matmul_candidate(config: dict, shape: dict, base_launch: dict) -> tuple[dict, dict]:
    m, n, k = shape["M"], shape["N"], shape["K"]
    trips = k // config["BK"]
    constants = {"BLOCK_M": config["BM"], "BLOCK_N": config["BN"], "BLOCK_K": config["BK"],
                 "NUM_STAGES": config["num_stages"], "NUM_WARPS": config["num_warps"], "ITERATIONS": trips,
                 "M": m, "N": n, "K": k}
    launch = {"constexprs": {"BM": config["BM"], "BN": config["BN"], "BK": config["BK"]},
              "num_stages": config["num_stages"], "num_warps": config["num_warps"], "iterations": trips,
              "args": {**base_launch["args"], "M": m, "N": n, "K": k}, "shapes": dict(shape)}
    return constants, launch


TMA_MATMUL = KernelSpec(
    name="tma_matmul", program_dir=ROOT / "examples" / "triton", module="tma_matmul.py", root_region="tma_matmul",
    knobs=(Knob("BM", (64, 128, 256)), Knob("BN", (64, 128, 256)), Knob("BK", (32, 64, 128)),
           Knob("num_stages", (2, 3, 4, 5)), Knob("num_warps", (4, 8)), Knob("warp_specialize", (False, True))),
    shapes=({"M": 2048, "N": 2048, "K": 512}, {"M": 4096, "N": 4096, "K": 512},
            {"M": 1024, "N": 1024, "K": 2048}, {"M": 8192, "N": 1024, "K": 1024}),
    remedies={
        # loads not hidden behind the MMA: deeper pipeline, a producer warp, longer K tiles
        "memory": (("num_stages", +1), ("warp_specialize", +1), ("BK", +1), ("num_warps", +1)),
        # CTA barriers / mbarrier waits: let a producer partition run ahead, or fewer warps to sync
        "sync": (("warp_specialize", +1), ("num_stages", +1), ("num_warps", -1)),
        # tensor-core or issue bound: bigger tiles amortise the loads, more warps issue more
        "compute": (("BN", +1), ("BM", +1), ("num_warps", +1)),
        "issue": (("num_warps", +1), ("BN", +1), ("BK", -1)),
        # the store of C dominates: fewer, larger output tiles
        "epilogue": (("BN", +1), ("BM", +1)),
    },
)


# ---- layer norm (examples/triton_corpus/layernorm) ----------------------------------------------
def _layernorm_valid(config: dict, shape: dict) -> str | None:
    return None  # every load and store is masked


def _layernorm_candidate(config: dict, shape: dict, base_launch: dict) -> tuple[dict, dict]:
    rows, cols = shape["N_ROWS"], shape["N_COLS"]
    trips = math.ceil(cols / config["BLOCK"])
    constants = {"N_ROWS": rows, "N_COLS": cols, "BLOCK": config["BLOCK"], "NUM_WARPS": config["num_warps"],
                 "NUM_STAGES": config["num_stages"], "ITERATIONS": trips}
    launch = {"constexprs": {"BLOCK": config["BLOCK"]}, "num_stages": config["num_stages"],
              "num_warps": config["num_warps"], "iterations": trips,
              "args": {**base_launch["args"], "n_cols": cols, "stride": cols}, "shapes": dict(shape)}
    return constants, launch


LAYERNORM = KernelSpec(
    name="layernorm", program_dir=ROOT / "examples" / "triton_corpus" / "layernorm", module="layernorm.py",
    root_region="layernorm",
    knobs=(Knob("BLOCK", (256, 512, 1024, 2048, 4096)), Knob("num_warps", (1, 2, 4, 8, 16)),
           Knob("num_stages", (1, 2, 3))),
    shapes=({"N_ROWS": 2048, "N_COLS": 8192}, {"N_ROWS": 4096, "N_COLS": 4096},
            {"N_ROWS": 1024, "N_COLS": 16384}, {"N_ROWS": 8192, "N_COLS": 2048}),
    remedies={
        # global loads in flight too few: wider blocks per load, more warps, a pipelined loop
        "memory": (("BLOCK", +1), ("num_warps", +1), ("num_stages", +1)),
        # the tl.sum reductions' barriers: fewer warps to synchronise
        "sync": (("num_warps", -1), ("BLOCK", +1)),
        "compute": (("num_warps", +1), ("BLOCK", -1)),
        "issue": (("num_warps", +1), ("BLOCK", +1)),
        "epilogue": (("BLOCK", +1),),
    },
)

# The same matmul from the smallest corner of its space (the tutorial's own launch, the start above, is
# already a local optimum at these shapes: H200 2026-12-02, 25 trials of each policy found nothing faster).
TMA_MATMUL_UNTUNED = replace(TMA_MATMUL, name="tma_matmul_untuned", family="tma_matmul",
                             start_overrides={"BM": 64, "BN": 64, "BK": 32, "num_stages": 2, "num_warps": 4})

KERNELS = {spec.name: spec for spec in (TMA_MATMUL, LAYERNORM, TMA_MATMUL_UNTUNED)}
_VALIDITY = {"tma_matmul": _matmul_valid, "layernorm": _layernorm_valid}
_CANDIDATES = {"tma_matmul": _matmul_candidate, "layernorm": _layernorm_candidate}


def kernel(name: str) -> KernelSpec:
    if name not in KERNELS:
        raise KernelSpecError(f"--kernels: {name!r} unknown; valid: {', '.join(KERNELS)}")
    return KERNELS[name]
