"""Wiring of the mapping run and the ncu collect without a GPU: a stand-in ``ncu`` (this test's own
script, set through $NCU) prints a source page for the cubin the pipeline really built.

The stand-in's counts are 1 per reachable PC: this checks plumbing (build, runner argv, CSV,
binary identity, map, -lineinfo view, evidence files), not numbers; tests/test_ground_truth*.py
check numbers on real ncu output.
"""
import json
import stat
import sys
from pathlib import Path

import pytest

from argus_rt.evidence import PcCounters, PcRegionCounts
from argus_rt.program import load_program
from toolchain import NVCC

ROOT = Path(__file__).resolve().parent.parent
GT = ROOT / "examples" / "ground_truth"
STUB_DRIVER = ROOT / "tests" / "stub_driver"  # cuda.bindings.driver on NumPy: the runner runs without a GPU

STAND_IN = r'''#!{python}
import json, os, re, subprocess, sys
from argus_rt import sass
from argus_rt.backends.pcmap import static_ownership
from argus_rt.kinds.run_variant import variant_cubin
from argus_rt.program import ProgramVersion
args = sys.argv[1:]
assert "--page" in args and "source" in args and "--csv" in args, args
if "--outputs" in args:  # the runner leaves the reference check to its parent: run it, on the stand-in driver
    program = args[args.index("-m") - 1:]
    env = dict(os.environ, PYTHONPATH="{stub}" + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(program, env=env, check=True)
p = ProgramVersion.from_dict(json.load(open(args[args.index("--program") + 1])))
cubin = variant_cubin(p, args[args.index("--variant") + 1])
f = sass.select_function(sass.parse_sass(sass.disassemble(cubin)), p.launch["kernel"])
reach = static_ownership(f).entry_of
base = 0x7F0000000000
print("==PROF== Connected to process 1 (stand-in)")
demangled = "ground_truth_kernel(const float *, const float *, float *, int, int, int, int)"
print('"Kernel Name","%s",' % (f.name if not f.name.startswith("_Z") else demangled))
print('"Address","Source","Instructions Executed","Thread Instructions Executed","Predicated-On Thread Instructions Executed"')
for ins in f.instructions:
    text = ins.text
    if ins.targets:
        text = re.sub(r"0x[0-9a-f]+\s*$", hex(base + ins.targets[0]), text)
    c = 1 if ins.pc in reach else 0
    print('"%s","      %s","%d","%d","%d"' % (hex(base + ins.pc), text, c, 32 * c, 32 * c))
'''


@pytest.fixture
def stand_in_ncu(tmp_path, monkeypatch):
    if NVCC is None:
        pytest.skip("no nvcc where argus_rt.tools looks")
    script = tmp_path / "ncu"
    script.write_text(STAND_IN.replace("{python}", sys.executable).replace("{stub}", str(STUB_DRIVER)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NCU", str(script))
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return script


def _ctx(tmp_path, config, name="out"):
    program = load_program(GT).variant_of("marker_only")
    out = tmp_path / name
    out.mkdir()
    return _collect_context(program, config, out)


def _collect_context(program, config, out):
    from argus_rt.backends.base import CollectContext

    return CollectContext(task=None, program=program, config=config, scope=None, sampling={}, inputs={}, outdir=out,
                          device="")


def test_pcmap_adapter_writes_a_map_with_lineinfo_view(stand_in_ncu, tmp_path):
    from argus_rt.backends.base import get_backend
    from argus_rt.backends.pcmap import PcRegionMap

    files = get_backend("pcmap").collect(_ctx(tmp_path, {}))
    assert json.loads(Path(files["pc_region_counts"]).read_text())["format"] == "argus.pc_region_counts/2"
    doc = PcRegionCounts.from_outputs(files.get).document()
    assert doc["format"] == "argus.pc_region_counts/1" and doc["method"] == "sass_cfg+ncu"
    assert doc["provenance"]["kernel_symbol"] == "_Z19ground_truth_kernelPKfS0_Pfiiii"
    methods = set(doc["pc_methods"].values())
    assert {"static_cfg", "call_site_split", "unreachable"} <= methods
    files_view = doc["source_file_attribution"]["inst_executed"]
    assert set(files_view) >= {"ground_truth.cu", "gt_helper.cuh"}
    pmap = PcRegionMap.from_evidence(doc)
    assert pmap.shared_pcs()  # the helper is shared by two call sites
    assert Path(files["ncu_csv"]).is_file()
    # the profiled runner launched the cubin built here and left the reference check to this process
    prov = doc["provenance"]
    assert prov["reference_check"]["max_rel_err"] == 0.0  # the stand-in driver computes the reference exactly
    assert {"build", "disassemble", "ncu", "reference", "map"} <= set(prov["seconds"])


def test_the_mapping_run_disassembles_once_and_hands_the_cubin_over(stand_in_ncu, tmp_path, monkeypatch):
    from argus_rt import sass
    from argus_rt.backends import ncu, pcmap

    calls, commands = [], []
    real_disassemble, real_run = sass.disassemble, ncu.run_ncu_command
    monkeypatch.setattr(sass, "disassemble", lambda *a, **kw: calls.append(kw) or real_disassemble(*a, **kw))
    monkeypatch.setattr(ncu, "run_ncu_command", lambda cmd, **kw: commands.append(cmd) or real_run(cmd, **kw))
    ctx = _ctx(tmp_path, {})
    doc, _ = pcmap.mapping_run(ctx.program, ctx.outdir)
    assert calls == [{"tool": "nvdisasm", "line_info": True}], "one disassembler run gives the CFG and the line info"
    (cmd,) = commands
    cubin = cmd[cmd.index("--cubin") + 1]
    assert Path(cubin).name == doc["provenance"]["cubin"] and cmd[cmd.index("--symbol") + 1] == doc["provenance"]["kernel_symbol"]
    assert cmd[cmd.index("--outputs") + 1] == str(ctx.outdir / "profiled_run.npz")


def test_a_wrong_output_of_the_profiled_launch_fails_the_mapping_run(stand_in_ncu, tmp_path, monkeypatch):
    """The parent's check reads what the profiled launch wrote (here: a kernel that writes zeros)."""
    from argus_rt.backends.base import get_backend
    from argus_rt.kinds.errors import ReferenceMismatchError

    monkeypatch.setenv("STUB_KERNEL_MODE", "zeros")
    with pytest.raises(ReferenceMismatchError, match=r"^output arg 2 differs from the reference: max rel err"):
        get_backend("pcmap").collect(_ctx(tmp_path, {}))


def test_nvdisasm_and_cuobjdump_give_the_same_cfg(stand_in_ncu, tmp_path):
    """The mapping reads its CFG from ``nvdisasm -g`` alone: same PCs, opcodes, predicates, branch
    targets, markers, blocks and call sites as ``cuobjdump -sass`` (ground truth: a helper called twice)."""
    from argus_rt import sass
    from argus_rt.backends.pcmap import read_cubin
    from argus_rt.kinds.run_variant import variant_cubin

    def key(f):
        return ([(i.pc, i.predicate, i.opcode, i.targets, i.marker_immediate if i.is_marker_word else None)
                 for i in f.instructions],
                sorted((b.start, tuple(b.successors), b.indirect) for b in f.blocks.values()),
                sorted(f.subroutine_entries), sorted(f.call_sites))

    cubin = variant_cubin(load_program(GT).variant_of("marker_only"), "marker_only")
    lined, arch = read_cubin(cubin, "ground_truth_kernel")
    plain = sass.select_function(sass.parse_sass(sass.disassemble(cubin)), "ground_truth_kernel")
    assert key(lined) == key(plain) and plain.call_sites and arch == sass.sass_arch(sass.disassemble(cubin)) == "sm_90"
    assert all(i.source for i in lined.instructions[:4])


def test_ncu_adapter_collects_pc_counters_of_the_same_cubin(stand_in_ncu, tmp_path):
    from argus_rt.backends.base import get_backend

    files = get_backend("ncu").collect(_ctx(tmp_path, {"sections": ["SourceCounters"]}))
    doc = PcCounters.from_outputs(files.get).document(lists=True)
    assert doc["format"] == "argus.pc_counters/1" and doc["pcs"][0] == "ground_truth_kernel@0x0"
    assert "BAR" in doc["opcodes"] and sum(doc["metrics"]["barrier_inst_executed"]) == 1
    # Keys agree with the map's, so synthesis can join them.
    files2 = get_backend("pcmap").collect(_ctx(tmp_path, {}, name="map"))
    keys = set(PcRegionCounts.from_outputs(files2.get).entries["pc"].tolist())
    assert keys == set(doc["pcs"])


def test_pcmap_on_the_triton_example(stand_in_ncu, tmp_path):
    """The Triton example's cubin (compiled on the CPU for sm_90): markers found, map built,
    HGMMA owned by the mma region."""
    from argus_rt.backends.base import get_backend
    from argus_rt.backends.pcmap import PcRegionMap

    program = load_program(ROOT / "examples" / "triton").variant_of("marker_only")
    out = tmp_path / "tri"
    out.mkdir()
    ctx = _collect_context(program, {}, out)
    files = get_backend("pcmap").collect(ctx)
    pmap = PcRegionMap.from_evidence(PcRegionCounts.from_outputs(files.get).document())
    mma = program.regions["tma_matmul/kloop/mma"].id
    hgmma = [pc for pc, op in pmap.opcodes.items() if op == "HGMMA"]
    assert hgmma and all(set(pmap.pcs[pc].leaf_counts()) == {mma} for pc in hgmma)
