"""Tile-DAG builder: shapes, counts, dependency order, and what a broken DAG looks like."""
import dataclasses

import pytest

from megakernel.dag import DagError, TileShape, build_decode_program
from megakernel.instructions import NO_COUNTER, AttnPartial, Down, Embed, GateUp, Logits, OProj, QkvHead, Sample
from tinyllama.config import get_config


def test_tinyllama_program_shape():
    c = get_config("tinyllama-1.1b")
    tiles = TileShape()
    prog = build_decode_program(c, tiles)
    kinds = {}
    for ins in prog.instructions:
        kinds[type(ins)] = kinds.get(type(ins), 0) + 1
    n_splits = -(-c.max_seq // tiles.attn_split)
    assert kinds == {
        Embed: 1, Sample: 1,
        QkvHead: c.n_layers * (c.n_heads + 2 * c.n_kv_heads) * tiles.qkv_parts,
        AttnPartial: c.n_layers * c.n_kv_heads * n_splits * tiles.head_parts(c),
        OProj: c.n_layers * c.hidden // tiles.o_rows,
        GateUp: c.n_layers * c.ffn // tiles.gate_features,
        Down: c.n_layers * c.hidden // tiles.down_rows,
        Logits: c.vocab // tiles.logits_rows,
    }
    assert len(prog.counters) == 2 + 5 * c.n_layers + 1
    assert prog.words().shape == (len(prog.instructions), 16)


def test_qkv_parts_multiply_the_head_tiles():
    c = get_config("tiny")
    prog = build_decode_program(c, TileShape(attn_split=64, logits_rows=64, qkv_parts=2))
    qkv = [(i.kind, i.head, i.part) for i in prog.instructions if isinstance(i, QkvHead) and i.layer == 0]
    assert len(qkv) == len(set(qkv)) == 2 * (c.n_heads + 2 * c.n_kv_heads)
    attn = next(i for i in prog.instructions if isinstance(i, AttnPartial))
    assert attn.wait_count == len(qkv)


def test_every_weight_row_is_covered_once():
    c = get_config("tiny")
    prog = build_decode_program(c, TileShape(o_rows=32, gate_features=32, down_rows=16, logits_rows=128, attn_split=64))
    for layer in range(c.n_layers):
        o = sorted((i.row0, i.rows) for i in prog.instructions if isinstance(i, OProj) and i.layer == layer)
        assert [r0 for r0, _ in o] == list(range(0, c.hidden, 32))
        g = [i.f0 for i in prog.instructions if isinstance(i, GateUp) and i.layer == layer]
        assert g == list(range(0, c.ffn, 32))
        heads = [(i.kind, i.head) for i in prog.instructions if isinstance(i, QkvHead) and i.layer == layer]
        assert len(set(heads)) == c.n_heads + 2 * c.n_kv_heads
    assert sum(i.rows for i in prog.instructions if isinstance(i, Logits)) == c.vocab


def test_waits_point_backwards_with_exact_counts():
    prog = build_decode_program(get_config("tiny"), TileShape(attn_split=64, logits_rows=64))
    counts = prog.signals_per_step()
    signalled_at = {}
    for idx, ins in enumerate(prog.instructions):
        signalled_at.setdefault(ins.signal, []).append(idx)
    for idx, ins in enumerate(prog.instructions):
        if ins.wait == NO_COUNTER:
            continue
        assert ins.wait_count == counts[ins.wait]
        if ins.wait_delta == 0:
            assert max(signalled_at[ins.wait]) < idx  # all producers come earlier: no deadlock
        else:
            assert isinstance(ins, Embed) and prog.counters[ins.wait] == "sample"
    emb = prog.instructions[0]
    assert emb.expected(0) == 0 and emb.expected(5) == 5  # step 0 needs no previous Sample


def test_check_rejects_forward_and_miscounted_waits():
    prog = build_decode_program(get_config("tiny"), TileShape(attn_split=64, logits_rows=64))
    first_o = next(i for i, ins in enumerate(prog.instructions) if isinstance(ins, OProj))
    bad = dataclasses.replace(prog.instructions[first_o], wait_count=prog.instructions[first_o].wait_count + 1)
    prog.instructions[first_o] = bad
    with pytest.raises(DagError, match="expects .* signals per step"):
        prog.check()
    prog = build_decode_program(get_config("tiny"), TileShape(attn_split=64, logits_rows=64))
    # Make the first QKV tile wait on the logits counter: its producers come later -> deadlock.
    first_qkv = next(i for i, ins in enumerate(prog.instructions) if isinstance(ins, QkvHead))
    logits_ctr = prog.counters.index("logits")
    prog.instructions[first_qkv] = dataclasses.replace(prog.instructions[first_qkv], wait=logits_ctr,
                                                       wait_count=prog.signals_per_step()[logits_ctr])
    with pytest.raises(DagError, match="deadlock"):
        prog.check()


@pytest.mark.parametrize("field,value,msg", [
    ("o_rows", 24, "does not divide"), ("gate_features", 0, "positive even"), ("logits_rows", 3, "positive even"),
    ("qkv_parts", 3, "qkv_parts=3 must be"), ("qkv_parts", 16, "divisible by 4 \\* qkv_parts"),
])
def test_bad_tile_shapes(field, value, msg):
    with pytest.raises(DagError, match=msg):
        build_decode_program(get_config("tiny"), TileShape(**{field: value}))


def test_attention_head_parts_multiply_the_attention_tiles():
    c = get_config("tiny")
    prog = build_decode_program(c, TileShape(attn_split=64, logits_rows=64, attn_head_parts=2))
    attn = [(i.kv_head, i.split, i.head_part) for i in prog.instructions if isinstance(i, AttnPartial) and i.layer == 0]
    assert len(attn) == len(set(attn)) == c.n_kv_heads * TileShape(attn_split=64).n_splits(c) * 2
    oproj = next(i for i in prog.instructions if isinstance(i, OProj))
    assert oproj.wait_count == len(attn)
    with pytest.raises(DagError, match="attn_head_parts"):
        build_decode_program(c, TileShape(attn_split=64, logits_rows=64, attn_head_parts=3))
