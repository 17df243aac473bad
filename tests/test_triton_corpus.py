"""The Triton corpus (examples/triton_corpus) on the CPU: every program compiles for sm_90 exactly as
its module does, `argus plan` and `argus discover` run on it, and the TTGIR reader finds its
reductions, helper regions (per call site), loops and region ops.

Each program is compiled once per session (the fixture below; Triton's cache serves the module's
own compile_reference), so the file stays cheap on a shared CPU."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from argus_rt.cli import main  # noqa: E402
from argus_rt.kinds.triton.async_sites import discover  # noqa: E402
from argus_rt.kinds.triton.probes import ProbeError, make_forced_wait_probe, make_iteration_trace  # noqa: E402
from argus_rt.kinds.triton.program import KernelConfigError, program_ttgir, unwrap_kernel  # noqa: E402
from argus_rt.kinds.triton.region_trace import make_region_trace  # noqa: E402
from argus_rt.kinds.triton.ttgir_module import parse_module, text_name  # noqa: E402
from argus_rt.kinds.triton.ttgir_regions import region_ops, region_spans  # noqa: E402
from argus_rt.program import load_program  # noqa: E402
from argus_rt.regions import RegionTree  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "triton_corpus"
PROGRAM_FILES = sorted(CORPUS.glob("*/argus_program*.json"))
NAMES = [p.parent.name + ("" if p.name == "argus_program.json" else "_" + p.name.split(".")[1]) for p in PROGRAM_FILES]
KINDS_OF_KERNEL = {"softmax", "layernorm", "rmsnorm", "attention", "attention_causal", "matmul_autotuned",
                   "linear_cp_async"}


def _module(program):
    spec = importlib.util.spec_from_file_location(f"corpus_{program.name}", Path(program.root) / program.launch["module"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def compiled():
    """name -> (program, module, TTGIR): each corpus program compiled once for sm_90."""
    out = {}
    for name, path in zip(NAMES, PROGRAM_FILES):
        program = load_program(path)
        ttgir, _ = program_ttgir(program)
        out[name] = (program, _module(program), ttgir)
    return out


def test_the_corpus_has_every_kind_the_issue_lists():
    assert set(NAMES) == KINDS_OF_KERNEL


@pytest.mark.parametrize("name", NAMES)
def test_program_compiles_for_sm90_as_its_module_does(compiled, name):
    program, mod, ttgir = compiled[name]
    assert 'ttg.target = "cuda:90"' in ttgir
    assert mod.compile_reference().asm["ttgir"] == ttgir  # the program file and the module describe one kernel
    assert program.launch["iterations"] == mod.ITERATIONS
    protocol = [f for f in ("compile_reference", "make_inputs", "run", "reference") if not hasattr(mod, f)]
    assert protocol == []


@pytest.mark.parametrize("name", NAMES)
def test_regions_json_is_the_kernel_s_region_tree(compiled, name):
    program, _, ttgir = compiled[name]
    tree, _ = region_spans(parse_module(ttgir))
    manifest = RegionTree.load(Path(program.root) / "regions.json")
    assert sorted(tree.names) == sorted(manifest.names)


@pytest.mark.parametrize("name", NAMES)
def test_every_leaf_region_holds_ops(compiled, name):
    _, _, ttgir = compiled[name]
    module = parse_module(ttgir)
    tree, spans = region_spans(module)
    held = region_ops(module, spans)
    for region in tree:
        if not tree.children(region.name):
            assert held[region.name], f"{name}: region {region.name} holds no op"


@pytest.mark.parametrize("name", NAMES)
def test_plan_and_discover_run(compiled, name, tmp_path, capsys):
    path = PROGRAM_FILES[NAMES.index(name)]
    program, _, _ = compiled[name]
    root = RegionTree.load(Path(program.root) / "regions.json").roots()[0].name
    assert main(["plan", str(path), "--region", root, "--signals", "latency"]) == 0
    out = tmp_path / "sites.json"
    assert main(["discover", str(path), "--json", str(out)]) == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["format"] == "argus.async_sites/1" and doc["helper_regions"] == "per_call_site"
    assert {r["name"] for r in doc["regions"]} <= set(RegionTree.load(Path(program.root) / "regions.json").names)


@pytest.mark.parametrize("name,reductions", [("softmax", 2), ("layernorm", 2), ("rmsnorm", 1), ("attention", 2),
                                             ("attention_causal", 4)])
def test_reductions_parse_and_sit_in_their_regions(compiled, name, reductions):
    module = parse_module(compiled[name][2])
    reduce_ops = [o for o in module.ops if o.name == "tt.reduce"]
    assert len(reduce_ops) == reductions
    assert all(o.text.lstrip().split(" = ", 1)[1].startswith('"tt.reduce"(') for o in reduce_ops)  # generic form
    _, spans = region_spans(module)
    held = region_ops(module, spans)
    expected = {"softmax": "softmax/normalize", "layernorm": "layernorm/stats", "rmsnorm": "rmsnorm/reduce",
                "attention": "attention/kv_loop/softmax", "attention_causal": "attention/kv_loop/softmax"}[name]
    assert all(o in held[expected] for o in reduce_ops)


@pytest.mark.parametrize("name,calls", [("attention", 1), ("attention_causal", 2)])
def test_helper_regions_have_one_span_per_call_site(compiled, name, calls):
    program, _, ttgir = compiled[name]
    d = discover(ttgir, "attention/kv_loop", iterations=program.launch["iterations"])
    loop_spans = [s for s in d.spans if s.name == "attention/kv_loop"]
    assert len(loop_spans) == calls and all(s.call_site for s in loop_spans)
    assert len({s.call_site for s in loop_spans}) == calls
    # per call site: the K and V loads, Q K^T and P V
    assert sorted((s.kind, s.label) for s in d.sites) == sorted(
        [("tma_load", "k"), ("tma_load", "v"), ("wgmma", "qk"), ("wgmma", "acc")] * calls)
    assert {s.call_site for s in d.sites} == {s.call_site for s in loop_spans}
    for s in d.sites:
        assert " > " in s.call_stack and s.call_stack.startswith(s.call_site)


def test_query_load_from_a_barrier_straight_from_local_alloc(compiled):
    _, _, ttgir = compiled["attention"]
    d = discover(ttgir, "attention", iterations=16)
    q = next(s for s in d.sites if s.label == "q")
    module = parse_module(ttgir)
    alloc = module.defs[q.completion.barrier_alloc]
    assert alloc.name == "ttg.local_alloc" and q.completion.barrier_slots == 1
    assert [(i.placement, i.iterations) for i in q.instances] == [("straight", [0])]


def test_causal_loop_with_a_run_time_lower_bound_is_traced_and_probed(compiled, tmp_path):
    program, _, ttgir = compiled["attention_causal"]
    module = parse_module(ttgir)
    runtime = [lp for lp in module.loops.values() if module.constant_int(lp.lower) is None]
    assert len(runtime) == 1  # the diagonal block's loop starts at start_m * BLOCK_M
    loop = runtime[0]
    iterations = program.launch["iterations"]
    traced = make_region_trace(ttgir, iterations)
    assert f"arith.subi {text_name(loop.iv)}, {text_name(loop.lower)} : i32" in traced.ttgir
    d = discover(ttgir, None, iterations=iterations)
    second = [s for s in d.sites if s.kind == "tma_load" and s.label == "k"][-1]
    # the diagonal loop runs [m * BLOCK_M, (m + 1) * BLOCK_M) step BLOCK_N: 2 trips in every CTA, both
    # served by prologue copies (num_stages=3), so no probe is planned for a trip no CTA runs
    assert second.iterations == [0, 1] and second.completion.loop_trips == 2
    with pytest.raises(ProbeError, match=r"iteration 5 is not served .* valid iterations: \[0, 1\]"):
        make_forced_wait_probe(ttgir, d, second.op_id, 5)
    assert "%argus_pbar" in make_forced_wait_probe(ttgir, d, second.op_id, 1).ttgir
    # a trip of this loop, were one selected, is found at run time from its SSA lower bound
    from argus_rt.kinds.triton.ttgir_edit import iv_for_trip_lines

    lines, _ = iv_for_trip_lines("", "argus_trip", module, loop, 5)
    assert f"arith.addi {text_name(loop.lower)}, %argus_trip_toff" in "\n".join(lines)
    assert make_iteration_trace(ttgir, d, kinds=("tma_load",)).count("%globaltimer") == 4  # both loops' TMA waits
    assert make_iteration_trace(ttgir, d).count("%globaltimer") == 8  # and both loops' dot waits
    from argus_rt.kinds.triton.probes import compile_ttgir

    k = compile_ttgir(traced.ttgir, tmp_path, "causal_traced")  # the GPU compile path, on the CPU
    assert len(k.asm["cubin"]) > 0


def test_cp_async_and_matmul_sites(compiled):
    program, _, ttgir = compiled["linear_cp_async"]
    d = discover(ttgir, "linear/kloop", iterations=program.launch["iterations"])
    assert [(s.kind, s.label) for s in d.sites] == [("cp_async", "x"), ("cp_async", "w"), ("wgmma", "acc")]
    stages = program.launch["num_stages"]
    for s in d.sites[:2]:
        assert [i.placement for i in s.instances] == ["prologue"] * (stages - 1) + ["loop"]
        assert s.completion.kind == "cp_async_group" and s.completion.wait_count == stages - 1
    program, _, ttgir = compiled["matmul_autotuned"]
    d = discover(ttgir, "matmul/kloop", iterations=program.launch["iterations"])
    assert ("wgmma", "acc") in [(s.kind, s.label) for s in d.sites]


def test_autotuned_kernel_runs_the_config_the_launch_names(compiled):
    program, mod, _ = compiled["matmul_autotuned"]
    launch = dict(program.launch)
    configs = mod.matmul_kernel.configs
    fn, kwargs = unwrap_kernel(mod.matmul_kernel, launch, "k")
    assert fn is mod.matmul_kernel.fn and kwargs == configs[0].all_kwargs()  # what the autotuner passes
    assert unwrap_kernel(mod.matmul_kernel, dict(launch, config=3), "k")[1] == configs[3].all_kwargs()
    assert unwrap_kernel(mod.matmul_kernel, dict(launch, config={"BM": 64, "BN": 128}), "k")[1]["BK"] == 32
    legacy = {"constexprs": dict(configs[1].kwargs), "num_warps": 4, "num_stages": 4}  # config named by value
    assert unwrap_kernel(mod.matmul_kernel, legacy, "k")[1] == configs[1].all_kwargs()
    off = dict(legacy, num_warps=2)
    with pytest.raises(KernelConfigError, match=r"^k is @triton.autotune'd over 4 configs and the launch names none "
                                                r"of them; set launch.config .*0: \{BM: 128, BN: 128, BK: 64, GROUP_M: 8, "
                                                r"num_warps: 8, num_ctas: 1, num_stages: 3\}; 1: "):
        unwrap_kernel(mod.matmul_kernel, off, "k")
    assert "\n" not in str(pytest.raises(KernelConfigError, unwrap_kernel, mod.matmul_kernel, off, "k").value)
    with pytest.raises(KernelConfigError, match=r"launch.config 4 is out of range; configs: 0: "):
        unwrap_kernel(mod.matmul_kernel, dict(launch, config=4), "k")
    with pytest.raises(KernelConfigError, match=r"matches 4 configs, not one"):
        unwrap_kernel(mod.matmul_kernel, dict(launch, config={"num_ctas": 1}), "k")
    with pytest.raises(KernelConfigError, match=r"launch gives num_warps=2 but the chosen autotune config has "
                                                r"num_warps=8"):
        unwrap_kernel(mod.matmul_kernel, dict(launch, num_warps=2), "k")


def test_heuristics_compute_from_the_launch_arguments(compiled):
    _, mod, _ = compiled["matmul_autotuned"]
    wrapped = triton.heuristics({"GROUP_M": lambda args: 4 if args["M"] < 4096 else 8})(mod.matmul_kernel.fn)
    with pytest.raises(KernelConfigError, match=r"@triton.heuristics computes 'GROUP_M' from the arguments"):
        unwrap_kernel(wrapped, {"constexprs": {"BM": 64}}, "k")
    assert unwrap_kernel(wrapped, {"constexprs": {"GROUP_M": 8}}, "k") == (mod.matmul_kernel.fn, {"GROUP_M": 8})
    assert unwrap_kernel(wrapped, {}, "k", {"M": 2048})[1] == {"GROUP_M": 4}
    with pytest.raises(KernelConfigError, match=r"heuristics for 'GROUP_M' failed on the launch's arguments "
                                                r"\(KeyError: 'M'\)"):
        unwrap_kernel(wrapped, {}, "k", {"N": 2048})
    with pytest.raises(KernelConfigError, match=r"is a 'int' object, not a @triton.jit function"):
        unwrap_kernel(3, {}, "k")
    with pytest.raises(KernelConfigError, match=r"is not @triton.autotune'd; launch.config 0 names nothing"):
        unwrap_kernel(mod.matmul_kernel.fn, {"config": 0}, "k")


def test_runtime_discovery_expander_and_probe_transform_on_causal_attention(compiled, tmp_path):
    """The query path's CPU half on a helper-and-causal kernel: the Control handler publishes the sites,
    the expander makes one probe per (op, iteration) of every family, and a probe in the run-time-bounded
    loop builds."""
    from argus_rt.branches import BranchBuilder
    from argus_rt.runtime.handlers import TaskContext, get_handler
    from argus_rt.tasks import Task

    program, _, _ = compiled["attention_causal"]

    def ctx(task, inputs=None):
        out = tmp_path / task.id
        out.mkdir(parents=True, exist_ok=True)
        return TaskContext(task=task, program=program, programs=lambda pid: program, inputs=inputs or {}, outdir=out)

    control = Task(kind="control", op="async_discovery", program=program.id, region="attention/kv_loop")
    outputs = get_handler("control", "async_discovery", "triton")(ctx(control))
    doc = json.loads(Path(outputs["async_sites"]).read_text())
    tma = [s for s in doc["sites"] if s["kind"] == "tma_load"]
    assert len(tma) == 4 and len({s["call_site"] for s in tma}) == 2
    builder = BranchBuilder(control, {program.id: program.to_dict()})
    get_handler("expander", "forced_wait_probes")(ctx(control, {"async_sites": Path(outputs["async_sites"])}), builder)
    transforms = [t for t in builder.new_tasks.values() if t.kind == "transform"]
    dots = [s for s in doc["sites"] if s["kind"] == "wgmma"]
    assert len(transforms) == sum(len(s["iterations"]) for s in tma + dots) and len(tma + dots) == len(doc["sites"])
    assert tma[2]["label"] == "k" and tma[2]["call_site"] != tma[0]["call_site"]
    second_loop_k = tma[2]["op_id"]  # the diagonal block's call: its loop has the run-time lower bound
    # below the diagonal the trip count depends on the CTA: every iteration up to launch.iterations is
    # probed; the diagonal loop runs 2 trips in every CTA: only those are probed
    assert [len(s["iterations"]) for s in tma] == [16, 16, 2, 2] and [len(s["iterations"]) for s in dots] == [16, 16, 2, 2]
    assert len(transforms) == 72
    task = next(t for t in transforms if t.config["op_id"] == second_loop_k and t.config["iteration"] == 1)
    out = get_handler("transform", "forced_wait_probe", "triton")(ctx(task))
    assert Path(out["cubin"]).stat().st_size > 0 and "%argus_pbar" in Path(out["ttgir"]).read_text()


@pytest.mark.parametrize("name", ["attention", "attention_causal"])
def test_tma_probes_build_and_verify(compiled, name):
    """Probe edits go through MLIR's verifier (checked_edit): the Q load whose barrier comes straight
    from ttg.local_alloc, and per K/V load its prologue copies and first and last loop trips (the
    causal kernel's second loop has a run-time lower bound)."""
    program, _, ttgir = compiled[name]
    d = discover(ttgir, None, iterations=program.launch["iterations"])
    picked = [(s, i) for s in d.sites if s.kind == "tma_load" for i in s.iterations if i in (0, 1, 2, s.iterations[-1])]
    # the causal kernel's diagonal loop runs 2 trips in every CTA: its K and V loads serve iterations 0, 1
    assert len(picked) == 1 + 4 * 2 + (2 * 2 if name == "attention_causal" else 0)
    probes = {make_forced_wait_probe(ttgir, d, s.op_id, i).variant_hash for s, i in picked}
    assert len(probes) == len(picked)


def test_causal_region_trace_decodes_one_occurrence_per_call_site_and_trip(compiled):
    """A buffer written the way the traced causal kernel writes it (the first loop runs 3 trips, the
    diagonal loop 2, the rest of the slots untouched) decodes to the helper's regions once per call
    site, and its loop regions once per trip of each call's loop."""
    import numpy as np

    from argus_rt.kinds.triton import region_trace as RT

    program, _, ttgir = compiled["attention_causal"]
    variant = make_region_trace(ttgir, program.launch["iterations"])
    loop_lines = sorted({s.loop_line for s in variant.sites if s.loop_line is not None})
    assert len(loop_lines) == 2  # one traced loop per call of the helper
    trips = dict(zip(loop_lines, (3, 2)))
    order = sorted(((s.order_key(t), s, t) for s in variant.sites
                    for t in range(trips.get(s.loop_line, 1) if s.loop_line else 1)), key=lambda x: x[0])
    buf = np.zeros(variant.words_per_cta, dtype=np.int64)
    buf[0] = 7 + 1  # SM 7
    for k, (_, s, t) in enumerate(order):
        w = RT.HEADER_WORDS + RT.WORDS_PER_RECORD * (s.first_slot + t)
        buf[w], buf[w + 1] = s.tag, 10**9 + 100 * k
    cols = RT.decode_region_buffer(buf, 1, variant.sites)
    by_region = {}
    for rid in cols["region_id"]:
        by_region[rid] = by_region.get(rid, 0) + 1
    ids = {r.name: r.id for r in program.regions}
    assert by_region[ids["attention/kv_loop"]] == 2  # one per call site
    assert by_region[ids["attention/kv_loop/softmax"]] == 3 + 2  # one per trip of each call's loop
    assert by_region[ids["attention"]] == 1 and by_region[ids["attention/epilogue"]] == 1


def test_every_combination_of_signals_plans_in_one_query(compiled):
    """Any subset of the five signals plans as one query on every corpus program: one target per
    signal, one Nsight Compute run however many PC-keyed signals are asked, one region trace at most."""
    from itertools import combinations

    from argus_rt.query import make_plan

    signals = ("latency", "async_completion_latency", "instruction_mix", "barrier_count", "stall_reasons")
    subsets = [c for n in range(1, len(signals) + 1) for c in combinations(signals, n)]
    for name, (program, _, _) in compiled.items():
        for subset in subsets:
            plan = make_plan(program, None, list(subset))
            assert set(plan.targets) == set(subset), (name, subset)
            ops = [t.op for t in plan.tasks.values() if t.kind == "collect"]
            assert ops.count("pcmap") == (1 if {"instruction_mix", "barrier_count", "stall_reasons"} & set(subset)
                                          else 0), (name, subset, ops)
            assert "ncu" not in ops, (name, subset, ops)
