"""Phase timeline of the megakernel trace (megakernel/timeline.py) and the ncu per-function
attribution (megakernel/ncu_attr.py), on hand-made inputs (no GPU)."""
import numpy as np

from argus_rt.trace.intervals import INTERVAL_DTYPE
from megakernel import ncu_attr, timeline
from megakernel.regions import coordinate

IDS = {1: "decode/core_loop", 2: "decode/gemm", 3: "decode/norm", 4: "decode/kv_update", 5: "decode/attention",
       6: "decode/core_loop/wait", 7: "decode/attention/scores"}


def _rows(spec):
    """spec: (cta, region id, step, layer, start, end) for warp 0 at depth 0 (depth 1 for detail regions)."""
    rows = np.zeros(len(spec), dtype=INTERVAL_DTYPE)
    for i, (cta, rid, step, layer, start, end) in enumerate(spec):
        rows[i]["cta"], rows[i]["region_id"], rows[i]["coord"] = cta, rid, coordinate(step, layer)
        rows[i]["depth"] = IDS[rid].count("/") - 1
        rows[i]["start"], rows[i]["end"], rows[i]["duration"] = start, end, end - start
    return rows


def test_tickets_are_classified_by_their_body_regions_and_phases_measure_the_hand_off():
    rows = _rows([
        # CTA 1: a QKV tile (norm + gemm + kv_update), then an attention tile
        (1, 1, 5, 0, 0, 100), (1, 3, 5, 0, 100, 150), (1, 2, 5, 0, 150, 300), (1, 4, 5, 0, 300, 310),
        (1, 1, 5, 0, 310, 500), (1, 5, 5, 0, 500, 900),
        # CTA 2: a QKV tile that ends later
        (2, 1, 5, 0, 0, 120), (2, 3, 5, 0, 120, 160), (2, 2, 5, 0, 160, 380), (2, 4, 5, 0, 380, 400),
        # warp 1 and nested rows are ignored
    ])
    tix = timeline.tickets(rows, IDS, n_layers=22)
    assert [t["op"] for t in tix] == ["qkv", "attn", "qkv"]
    phases = timeline.phase_table(tix)
    assert [(p["op"], p["tiles"]) for p in phases] == [("qkv", 2), ("attn", 1)]
    qkv, attn = phases
    assert qkv["first_start"] == 100 and qkv["last_end"] == 400 and qkv["span"] == 300
    assert attn["gap"] == 500 - 400  # from the last QKV end to the first attention body start
    assert qkv["wait_mean"] == (100 + 120) / 2
    assert qkv["sm_max"] == 2 and qkv["cta_max"] == 1  # both QKV tiles on SM 0 (the rows' default), one per CTA
    s = timeline.summary(phases)
    assert s["attn"]["body_us"] == 0.4 and s["qkv"]["regions_us"]["gemm"] == (150 + 220) / 2 / 1e3
    assert "| qkv | 1 | 2 |" in timeline.format_summary(s)


def test_detail_regions_split_the_hand_off_and_do_not_change_the_op():
    rows = _rows([
        (1, 1, 5, 0, 0, 100), (1, 3, 5, 0, 100, 150), (1, 2, 5, 0, 150, 300), (1, 4, 5, 0, 300, 400),  # QKV
        # CTA 2: an attention tile whose wait (depth 1 in core_loop) sees the QKV counter at 460
        (2, 1, 5, 0, 10, 480), (2, 6, 5, 0, 20, 460), (2, 5, 5, 0, 480, 900), (2, 7, 5, 0, 485, 700),
    ])
    tix = timeline.tickets(rows, IDS, n_layers=22)
    assert [t["op"] for t in tix] == ["qkv", "attn"]  # the nested rows do not make attention an O-proj
    assert tix[1]["regions"] == {"attention": 420, "core_loop/wait": 440, "attention/scores": 215}
    assert tix[1]["end"] == 900 and tix[1]["seen"] == 460
    qkv, attn = timeline.phase_table(tix)
    assert attn["gap"] == 80 and attn["seen_after"] == 60 and attn["wake"] == 20
    s = timeline.summary([qkv, attn])
    assert "0.08 (0.06 + 0.02)" in timeline.format_summary(s)


def test_ncu_rows_are_summed_per_function(tmp_path):
    csv_text = "\n".join([
        '==PROF== noise',
        '"Kernel Name","argus_megakernel",',
        '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_barrier","stall_long_sb"',
        '"0x1000","  LDC R1","10","5","10","0"',
        '"0x1010","  BAR.SYNC","30","5","30","0"',
        '"0x1100","  LDG.E.128","60","90","0","50"',
    ])
    path = tmp_path / "src.csv"
    path.write_text(csv_text + "\n")
    fns = [(0x100, 0x80, "$argus_megakernel$_ZN2mk9gemv_tileEPK13__nv_bfloat16iiPKfPf")]
    per, total, flat = ncu_attr.attribute(str(path), fns)
    assert total["samples"] == 100 and total["instructions"] == 100
    assert per["gemv_tile"]["samples"] == 60 and per["gemv_tile"]["stall_long_sb"] == 50
    body = next(k for k in per if k.startswith("kernel body"))
    assert per[body]["stall_barrier"] == 40
    assert [x[0] for x in flat][-1] == "gemv_tile"
