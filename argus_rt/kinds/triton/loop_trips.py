"""Loop indexing on the CPU: interpret the scalar integer ops of an ``scf.for`` body trip by trip.

Software pipelining keeps a barrier slot index and a phase in loop-carried values; discovery needs
their value in each trip (:func:`simulate_loop`). They depend only on constants and iter_args, not
on the induction variable, so a loop whose lower bound is a run-time value (causal attention starts
its key loop at the query block) is interpreted too: its induction variable is simply unknown, and
so is everything computed from it. What needs a trip index at run time (region traces, probes)
computes it on the GPU from the loop's own SSA bounds (:func:`argus_rt.kinds.triton.ttgir_edit.trip_index_lines`).
"""
from __future__ import annotations

from .ttgir_module import ForLoop, Module, Op, TtgirError
from .ttgir_text import CMPI_PREDICATES

_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "slt": lambda a, b: a < b,
        "sle": lambda a, b: a <= b, "sgt": lambda a, b: a > b, "sge": lambda a, b: a >= b,
        "ult": lambda a, b: a < b, "ule": lambda a, b: a <= b, "ugt": lambda a, b: a > b,
        "uge": lambda a, b: a >= b}
_BINARY = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
           "arith.xori": lambda a, b: a ^ b, "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b,
           "arith.maxsi": max, "arith.minsi": min, "arith.maxui": max, "arith.minui": min}


class LoopError(TtgirError):
    """A loop discovery cannot interpret; names the loop op and its TTGIR line."""


def eval_scalar(module: Module, op: Op, env: dict[str, int]) -> int | None:
    """Value of a scalar integer ``arith`` op given known SSA values, or None if not computable."""
    if not op.result_types or op.result_types[0].startswith("tensor<"):
        return None

    def val(s: str) -> int | None:
        return env[s] if s in env else module.constant_int(s)

    args = [val(o) for o in op.operands]
    if op.name == "arith.select" and len(args) == 3 and args[0] is not None:
        return args[1] if args[0] else args[2]
    if any(a is None for a in args):
        return None
    n = op.name
    if n in _BINARY:
        return _BINARY[n](args[0], args[1])
    if n in ("arith.remsi", "arith.remui") and args[1]:
        return args[0] % args[1]
    if n in ("arith.divsi", "arith.divui") and args[1]:
        return args[0] // args[1]
    if n in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast"):
        return args[0]
    if n == "arith.cmpi":
        pred = module.int_attr(op, "predicate")
        if pred is None or not 0 <= pred < len(CMPI_PREDICATES):
            return None
        return int(_CMP[CMPI_PREDICATES[pred]](args[0], args[1]))
    return None


def simulate_loop(module: Module, loop: ForLoop, trips: int) -> list[dict[str, int]]:
    """Run the loop body's scalar integer ops for ``trips`` trips; return each trip's known values.

    Values that depend on run-time kernel arguments (e.g. ``K``, or a run-time lower bound) stay
    unknown; slot indices and phases of a pipelined loop depend only on constants and iter_args.
    """
    if loop.yield_op is None and loop.iter_args:
        raise LoopError(f"{loop.op}: loop carries {len(loop.iter_args)} value(s) but has no scf.yield")
    lb, step = module.constant_int(loop.lower), module.constant_int(loop.step)
    carried: list[int | None] = [module.constant_int(i) for i in loop.inits]
    out = []
    body = [module.ops[i] for i in loop.body if module.ops[i].loop == loop.op.index]
    for t in range(trips):
        env: dict[str, int] = {} if lb is None or step is None else {loop.iv: lb + t * step}
        env.update((name, value) for name, value in zip(loop.iter_args, carried) if value is not None)
        for op in body:
            if op.results and op.name.startswith("arith."):
                v = eval_scalar(module, op, env)
                if v is not None:
                    env[op.results[0]] = v
        out.append(env)
        if loop.yield_op is not None:  # a loop without iter_args prints no yield
            carried = [env.get(y, module.constant_int(y)) for y in loop.yield_op.operands]
    return out


# ---- trip counts the same in every CTA --------------------------------------------------------------
_AFFINE_OPS = ("arith.addi", "arith.subi", "arith.muli")


def _affine(module: Module, ssa: str, depth: int = 0) -> dict[str, int]:
    """``ssa`` as an exact affine form ``{symbol: coefficient, "": constant}`` over opaque values.

    Only ``arith.addi`` / ``subi`` / ``muli`` (by a constant) are expanded; anything else (a kernel
    argument, ``tt.get_program_id``, an induction variable, a cast, a division) is its own symbol, so
    the form is exact in the integers modulo 2^width, the arithmetic the kernel does."""
    c = module.constant_int(ssa)
    if c is not None:
        return {"": c}
    op = module.defs.get(ssa)
    if op is None or op.name not in _AFFINE_OPS or len(op.operands) != 2 or depth > 64:
        return {ssa: 1}
    a, b = (_affine(module, o, depth + 1) for o in op.operands)
    if op.name == "arith.muli":
        if set(a) == {""}:
            a, b = b, a
        if set(b) != {""}:
            return {ssa: 1}  # a product of two run-time values: opaque
        return {k: v * b[""] for k, v in a.items()}
    sign = 1 if op.name == "arith.addi" else -1
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {k: v for k, v in out.items() if v or k == ""}


def static_trip_count(module: Module, loop: ForLoop) -> int | None:
    """The loop's trip count when it is the same in every CTA and every launch, else None.

    ``ceil((ub - lb) / step)`` when ``ub - lb`` reduces to a constant (:func:`_affine`: the run-time
    terms cancel) and the step is a positive constant. Causal attention's diagonal loop runs
    ``[m * BLOCK_M, (m + 1) * BLOCK_M)``: two trips of 64 in every CTA, whatever its program id;
    its off-diagonal loop ``[0, m * BLOCK_M)`` runs a trip count that depends on the CTA (None).
    None means "not known on the CPU", never "zero". (Assumes ``ub - lb`` does not overflow the
    induction variable's type, as the loop itself does.)"""
    step = module.constant_int(loop.step)
    if step is None or step <= 0:
        return None
    diff = _affine(module, loop.upper)
    for k, v in _affine(module, loop.lower).items():
        diff[k] = diff.get(k, 0) - v
    if any(v for k, v in diff.items() if k != ""):
        return None
    span = diff.get("", 0)
    return max(0, -(-span // step))
