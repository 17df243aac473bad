"""The megakernel compiles for sm_90a in every Argus mode, without spills, with the loads we designed."""
import re
import subprocess

import pytest

from argus_rt.markers import marker_immediates
from argus_rt.tools import find_tool, tool_or_none
from megakernel.build import ARCH_FLAGS, CSRC, SOURCE, BuildError, build, build_spec
from megakernel.dag import TileShape
from megakernel.regions import REGION_LEAVES, region_tree
from megakernel.runtime import DoesNotFitError, check_fits, kernel_limits
from tinyllama.config import get_config

pytestmark = pytest.mark.skipif(tool_or_none("nvcc") is None,
                                reason="needs nvcc (argus_rt.tools search order) to compile the megakernel")


def _sass(cubin) -> str:
    tool = find_tool("cuobjdump")
    return subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module", params=[0, 1, 2])
def built(request, tmp_path_factory):
    return build(request.param, build_dir=tmp_path_factory.mktemp(f"mk{request.param}"))


def _spills_by_function(log: str) -> dict[str, int]:
    out = {}
    for m in re.finditer(r"Function properties for (\S+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores", log):
        out[m.group(1)] = int(m.group(2))
    return out


def test_compiles_without_spills(built):
    assert built.cubin.stat().st_size > 0
    spills = _spills_by_function(built.ptxas_log)
    assert spills, built.ptxas_log
    # Two CTAs per SM cap registers at 128: the worker loop (and, in the trace build, attention) keeps a
    # few values on the stack (<= 96 bytes in all, L1-resident); the weight-streaming functions (GEMV,
    # norm and vector loads) spill nothing.
    assert all(n == 0 for name, n in spills.items() if any(k in name for k in ("gemv", "load_rmsnorm", "load_vector"))), built.ptxas_log
    assert sum(spills.values()) <= 96, built.ptxas_log
    assert built.registers() is not None and built.registers() <= 255
    assert "warning" not in built.ptxas_log.lower(), built.ptxas_log


def test_sass_has_16_byte_weight_loads_and_l2_bulk_prefetch(built):
    sass = _sass(built.cubin)
    assert re.search(r"LDG\.E\.NA\.128\.CONSTANT", sass), "GEMV weights must be 16-byte non-coherent loads"
    assert "UBLKPF.L2" in sass, "weight tiles are bulk-prefetched into L2 before the dependency wait"
    assert "UBLKCP" in sass and "SYNCS.PHASECHK" in sass, "staged tiles: bulk copy into shared memory + mbarrier wait"
    markers = re.findall(r"PMTRIG (0x[0-9a-f]+)", sass)
    if built.argus_mode == 1:
        imms = [int(m, 16) for m in markers]
        for leaf in REGION_LEAVES:
            rid = region_tree()[f"decode/{leaf}"].id
            begin = list(marker_immediates("begin", rid))
            assert any(imms[i:i + 3] == begin for i in range(len(imms))), f"no begin marker for decode/{leaf}"
    else:
        assert not markers, "only the marker-only build leaves PMTRIG words"


def test_cache_reuses_the_cubin(tmp_path):
    first = build(0, build_dir=tmp_path)
    again = build(0, build_dir=tmp_path)
    assert again.cached and again.cubin == first.cubin


def test_the_build_spec_compiles_what_the_plain_nvcc_command_does(built, tmp_path):
    """The megakernel's CudaBuildSpec (cache, include order, generated headers in the entry) changes no
    instruction: its SASS equals that of nvcc run by hand with the megakernel's flags."""
    if built.argus_mode != 1:
        pytest.skip("one mode is enough: the others differ only in -DARGUS_MODE")
    for name, text in build_spec(1).generated:
        (tmp_path / name).write_text(text)
    cubin = tmp_path / "plain.cubin"
    cmd = [str(find_tool("nvcc")), "-cubin", *ARCH_FLAGS, "-O3", "-std=c++17", "-DARGUS_MODE=1", f"-I{CSRC}",
           f"-I{CSRC / 'megakernel'}", f"-I{tmp_path}", "-o", str(cubin), str(SOURCE)]
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert _sass(cubin) == _sass(built.cubin)


def test_bad_mode_and_failing_nvcc(tmp_path):
    with pytest.raises(ValueError, match="argus_mode must be one of \\[0, 1, 2\\]"):
        build(3, build_dir=tmp_path)
    with pytest.raises(BuildError, match="nvcc failed"):
        build(0, build_dir=tmp_path, extra_flags=("-DARGUS_MODE_BOGUS", "--no-such-nvcc-flag"))


@pytest.mark.parametrize("flag", ["-DMK_LL_HANDOFF=1", "-DMK_DOWN_BODY=1"])
def test_removed_experiment_flags_are_refused(tmp_path, flag):
    """Rows 37 and 39 were removed (NOTES.md): their flags fail the build instead of building the plain kernel."""
    with pytest.raises(BuildError, match="were removed in session 15"):
        build(0, build_dir=tmp_path, extra_flags=(flag,))


@pytest.mark.parametrize("flag", ["-DMK_KV_STAGE=1", "-DMK_KV_STAGE_BYTES=77824"])
def test_removed_kv_stage_flags_are_refused(tmp_path, flag):
    """Row 43 (K/V staged in shared memory, a measured miss) was removed (NOTES.md "Row 43 removed"): its flags fail
    the build instead of building the plain kernel."""
    with pytest.raises(BuildError, match=r"MK_KV_STAGE and MK_KV_STAGE_BYTES in session 16 \(row 43\)"):
        build(0, build_dir=tmp_path, extra_flags=(flag,))


@pytest.mark.parametrize("flag", ["-DMK_ATTN_U=8", "-DMK_ATTN_O=1", "-DMK_ATTN_O_LINES=1", "-DMK_EARLY_KSPLIT=1"])
def test_removed_session18_flags_are_refused(tmp_path, flag):
    """Rows 50-52 (more K/V rows per trip; attention fused with O-proj through x_mid atomics; the early tiles split by
    K: measured misses) were removed (NOTES.md "Rows 50-51 removed", "Row 52 measured"): their flags fail the build
    instead of building the plain kernel."""
    with pytest.raises(BuildError, match=r"were removed in session 18"):
        build(0, build_dir=tmp_path, extra_flags=(flag,))


def test_fit_checks_name_the_limit():
    lim = kernel_limits()
    assert lim["THREADS"] == 256 and lim["NWARPS"] == 8
    check_fits(get_config("tinyllama-1.1b"), TileShape())
    with pytest.raises(DoesNotFitError, match="ffn = 16384"):
        check_fits(get_config("tinyllama-1.1b", ffn=16384), TileShape())
    with pytest.raises(DoesNotFitError, match="logits_rows = 512"):
        check_fits(get_config("tinyllama-1.1b"), TileShape(logits_rows=512))
