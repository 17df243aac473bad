"""SASS listing parser: instructions, blocks, CFG edges, call sites, line info (CPU only)."""
from pathlib import Path

import pytest

from argus_rt import sass

FIX = Path(__file__).parent / "fixtures" / "device_capture"


def _gt():
    text = (FIX / "gt_cuobjdump_sass.txt").read_text()
    return sass.select_function(sass.parse_sass(text), "ground_truth_kernel")


def test_cuobjdump_listing_of_the_ground_truth_kernel():
    f = _gt()
    assert f.name == "_Z19ground_truth_kernelPKfS0_Pfiiii"
    assert len(f.instructions) == 96 and f.instructions[-1].pc == 0x5F0
    assert f[0x150].predicate == "@!P0" and f[0x150].opcode == "BRA" and f[0x150].targets == (0x1B0,)
    # One __noinline__ helper, called from two sites (stage_a's 3-trip loop and stage_b).
    assert f.subroutine_entries == [0x4C0]
    assert [t for _, t in f.call_sites] == [0x4C0, 0x4C0]
    assert f[0x550].is_return and not f[0x550].falls_through


def test_cfg_edges_loops_and_exit():
    f = _gt()
    loop = f.block_of(0x180)
    assert loop.start == 0x170 and set(loop.successors) == {0x170, 0x1B0}  # back edge + exit
    exit_block = f.block_of(0x4B0)
    assert exit_block.instructions[-1].is_exit and exit_block.successors == []
    assert 0x4C0 not in f.reachable(0)  # the helper is reached only by CALL
    assert 0x4C0 in f.reachable(0x4C0) and 0x550 in [i.pc for b in f.reachable(0x4C0) for i in f.blocks[b].instructions]
    assert f.blocks[0x560].successors == [0x560]  # ptxas's trailing self-loop


def test_marker_words_are_read():
    f = _gt()
    words = [i.marker_immediate for i in f.instructions if i.is_marker_word]
    assert words[:3] == [0xA501, 0x3758, 0x2345]  # begin ground_truth (id 0x23453758)
    with pytest.raises(sass.SassParseError, match="not PMTRIG"):
        f[0].marker_immediate


def test_nvdisasm_labels_and_line_info_match_cuobjdump():
    text = """
//--------------------- .text._Z1kPf --------------------------
_Z1kPf:
\t//## File "/src/k.cu", line 5
        /*0000*/                   ISETP.GE.AND P0, PT, R2, 0x1, PT ;
        /*0010*/              @!P0 BRA `(.L_x_0) ;
.L_x_1:
\t//## File "/src/helper.cuh", line 9
        /*0020*/                   FFMA R3, R0, R3, 0.5 ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
.L_x_0:
        /*0040*/                   EXIT ;
"""
    f = sass.parse_sass(text)["_Z1kPf"]
    assert f[0x10].targets == (0x40,) and f[0x30].targets == (0x20,)
    assert f[0x20].source == ("/src/helper.cuh", 9) and f[0].source == ("/src/k.cu", 5)
    assert f.blocks[0x20].successors == [0x20, 0x40]


def test_ncu_rows_rebase_absolute_addresses():
    rows = [(0x7F00_0000, "LDC R1, c[0x0][0x28]"), (0x7F00_0010, "@P0 BRA 0x7f000000"),
            (0x7F00_0020, "CALL.REL.NOINC 0x7f000030"), (0x7F00_0030, "RET.REL.NODEC R2, 0x7f000000")]
    f = sass.function_from_rows("k(float*)", rows)
    assert f[0x10].targets == (0,) and f.call_sites == [(0x20, 0x30)]


def test_bad_listings_give_clear_errors():
    with pytest.raises(sass.SassParseError, match="no SASS instructions"):
        sass.parse_sass("Fatbin ptx code:\n.version 8.0\n")
    with pytest.raises(sass.SassParseError, match="cannot read the branch target"):
        sass.parse_sass("Function : k\n /*0000*/ BRA somewhere ;\n")
    with pytest.raises(sass.SassParseError, match="not an instruction"):
        sass.parse_sass("Function : k\n /*0000*/ BRA 0x100 ;\n /*0010*/ EXIT ;\n")
    with pytest.raises(sass.SassParseError, match="never defined"):
        sass.parse_sass("//----- .text.k -----\n /*0000*/ BRA `(.L_x_9) ;\n")
    funcs = sass.parse_sass("Function : _Z1aPf\n /*0000*/ EXIT ;\nFunction : _Z1bPf\n /*0000*/ EXIT ;\n")
    with pytest.raises(sass.SassParseError, match="unknown kernel 'c'.*_Z1aPf"):
        sass.select_function(funcs, "c")


def test_kernel_keys_agree_across_tools():
    assert sass.kernel_key("_Z19ground_truth_kernelPKfS0_Pfiiii") == "ground_truth_kernel"
    assert sass.kernel_key("ground_truth_kernel(const float *, float *, int)") == "ground_truth_kernel"
    assert sass.kernel_key("void ns::tile<int, 4>(float *)") == "tile"
    assert sass.kernel_key("_ZN2ns4tileIiEEvPf") == "tile"
    assert sass.pc_key("_Z1kPf", 0x1A0) == "k@0x1a0" and sass.parse_pc_key("k@0x1a0") == ("k", 0x1A0)
    with pytest.raises(ValueError, match="bad PC key"):
        sass.parse_pc_key("k:1a0")


def test_sass_arch_and_tools():
    assert sass.sass_arch((FIX / "gt_cuobjdump_sass.txt").read_text()) == "sm_90a"
    with pytest.raises(ValueError, match="valid: cuobjdump, nvdisasm"):
        sass.disassemble(FIX / "gt_cuobjdump_sass.txt", tool="objdump")
    with pytest.raises(FileNotFoundError, match="no such binary"):
        sass.disassemble("/nonexistent/a.cubin")
