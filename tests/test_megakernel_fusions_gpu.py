"""Megakernel variant binaries on a GPU (run by scripts/gpu_mk_run.sh with FUSION_TESTS=1, after the
benchmark, whose cubins they reuse).

Fused sampling: the default binary (fused Sample) and benchmarks/decode.py's mk_nofsample
(TileShape(fused_sample=False): Sample over all logits), each against the reference interpreter
instruction by instruction with on-device sampling at temperature 0 and 0.8 (tiny model: 8 partials),
and the two binaries drawing the same tokens on the full model (500 partials: 2 per Sample thread).

Chain rows (megakernel/NOTES.md "Ready for the next device run"; FUSION_K=chain selects them): the
batched GEMV in QKV and/or O-proj tiles (mk_batch_qkv, mk_batch_o, mk_batch_chain), its codegen control
(mk_chain_ctl) and two pollers per dependency (mk_poll2), each built with decode.py's own flags: against
the interpreter instruction by instruction (tiny model), and bit for bit equal to the default binary on the
tiny and the full model (the batched loop sums each lane's chunks in the plain loop's order).

Row 25 (FUSION_K=vecbatch): mk_vecserial's vector load (the default before row 25) bit for bit equal to the
default's on the full and tiny models.

The SM spread (the default's static ticket order since row 23; FUSION_K=spread): the default against the
interpreter, bit for bit equal to the block-index order (MK_SM_SPREAD=0) with the same tiles, its registration
spread over SMs, and mk_nospread's logits (the default before row 23) close to the default's.

Row 26 (FUSION_K=lastcombine; TileShape(last_combine=True), benchmarks/decode.py mk_lastcombine): each KV-head
group's combine by its last-arriving AttnPartial tile. Against the interpreter (tiny model, 3 used splits) and
against the default on the tiny model and on the full model at KV positions ~128 and ~1024 (2 and 9 used splits):
logits within 1e-3 of max |logit|, and then every buffer bit for bit (same arithmetic in the same order).

Row 27 (FUSION_K=adaptive; TileShape(last_combine="auto"), benchmarks/decode.py mk_adaptive_combine): one binary with
both combines, the form per launch by its largest KV length. Against the interpreter in one-step launches of both
forms (tiny model, 2 worker counts), bit for bit against the default with multi-step launches across the switch (tiny)
and on the full model at KV ~128 (O-proj form only) and ~1024 (the switch after the launch ending at 512).

Row 35 (FUSION_K=split_auto; TileShape(attn_split_long=256), the decoder's default since 15:18): the default binary,
each launch's attention split length by its largest KV length. Against the interpreter in one-step and multi-step
launches across the switch (tiny model, 2 worker counts), and against the default (bit for bit at KV ~128, where no
launch switches) and mk_split256 (logits) on the full model at KV ~128 and ~1024.

Row 38 (FUSION_K=gemv_batches; benchmarks/decode.py mk_o_pieces, on top of row 36's mk_down_pieces): O-proj rows in
whole batches of loads (gemv.cuh: gemv_batches). Against the interpreter (tiny model) and bit for bit
against mk_down_pieces on the full model at KV ~128 and ~1024 (every buffer; mk_o_pieces' o[L] counters count 2x).

Row 40 (FUSION_K=one_split; TileShape(single_split=256), benchmarks/decode.py mk_one_split, mk_one_split_o8): launches
whose largest KV length is <= single_split write the normalised attention output in the attention tiles and O-proj
loads it. Against the interpreter (tiny model, all three programs, one- and multi-step launches), bit for bit against
mk_split256 on the full model at KV ~128 (all but the partials and counters), and at KV ~1024 logits against the default
and layer 0's buffers bit for bit.
"""
import dataclasses
import os
import time

import pytest
import torch

from megakernel.dag import DEFAULT_TILES, NOEARLY_TILES, TileShape
from megakernel.interpreter import SamplingParams, localise
from tinyllama.config import get_config
from tinyllama.weights import random_weights

pytestmark = pytest.mark.gpu
TINY_TILES = TileShape(o_rows=16, gate_features=16, down_rows=16, logits_rows=64, attn_split=16)
SEED = int(os.environ.get("MEGAKERNEL_TEST_SEED", time.time_ns() % 2**31))
VARIANTS = {"default": True, "nofsample": False}  # name: TileShape.fused_sample


def setup_module(module):
    print(f"megakernel fused-sample GPU tests: seed {SEED} (replay with MEGAKERNEL_TEST_SEED={SEED})")


def _decoder(weights, **kw):
    from megakernel.runtime import MegakernelDecoder

    return MegakernelDecoder(weights, **kw)


def _assert_steps_match_interpreter(dec, prompt, label: str, sampling=None, steps: int = 36, after_step=None) -> None:
    """Run ``steps`` one-step launches (tiny model: 3 attention splits; steps 9.. sample their next token on
    the device) and localise each against the interpreter: the first instruction that differs fails.
    ``after_step(step)``: the caller's own checks after each step."""
    dec.set_prompt(prompt)
    for step in range(steps):
        before = dec.state.clone()
        dec.run(step, 1)
        extra = {"sampling": sampling} if sampling is not None else {}
        wrong = localise(before, dec.state, step, n_forced=len(prompt), rtol=5e-3, device="cuda", **extra)
        assert wrong is None, f"{label} step {step}: first instruction that differs from the interpreter: {wrong}"
        if after_step is not None:
            after_step(step)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_sample_variant_matches_interpreter(name, temperature):
    weights = random_weights(get_config("tiny"), seed=SEED + 1, device="cuda")
    sampling = SamplingParams(temperature, seed=SEED % 1000)
    tiles = dataclasses.replace(TINY_TILES, fused_sample=VARIANTS[name])
    dec = _decoder(weights, tiles=tiles, sampling=sampling)
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED)).tolist()
    _assert_steps_match_interpreter(dec, prompt, name, sampling=sampling)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_fused_and_unfused_binaries_draw_the_same_tokens(temperature):
    """Both compare the same fp32 values (the logit, or logit / T + Gumbel noise of the same hash) with
    the same tie rule, so the tokens must be equal, not just close."""
    c = get_config("tinyllama-1.1b", max_seq=256)
    weights = random_weights(c, seed=SEED, device="cuda")
    sampling = SamplingParams(temperature, seed=SEED % 1000)
    prompt = torch.randint(0, c.vocab, (8,), generator=torch.Generator().manual_seed(SEED + 2)).tolist()
    out = {}
    for name, fused in VARIANTS.items():
        dec = _decoder(weights, tiles=TileShape(fused_sample=fused), sampling=sampling)
        out[name] = dec.generate(prompt, n_new=32, chunk=8)
        del dec
    assert out["default"] == out["nofsample"]
    assert out["default"][:8] == prompt
    assert len(set(out["default"][8:])) > 1 or temperature == 0.0  # sampling really draws different tokens


CHAIN_ROWS = ("mk_batch_qkv", "mk_batch_o", "mk_batch_chain", "mk_chain_ctl", "mk_poll2", "mk_dynamic")


def _row_keywords(name: str) -> dict:
    """The row's decoder keywords as benchmarks/decode.py passes them (same flags, same cached cubin): its build
    flags, and its tiles, which are DEFAULT_TILES or, for the rows whose flags exclude the default's early loads
    (decode.py EARLY_CONFLICTS), NOEARLY_TILES."""
    from benchmarks.decode import variant_rows

    row = variant_rows()[name]
    assert set(row) <= {"build_flags", "tiles"}, f"{name} changes more than build flags and tiles: {row}"
    tiles = row.get("tiles", DEFAULT_TILES)
    assert tiles in (DEFAULT_TILES, NOEARLY_TILES), f"{name} changes tiles beyond the early loads: {tiles}"
    return {"tiles": tiles, "build_flags": tuple(row["build_flags"])}


def _row_flags(name: str) -> tuple[str, ...]:
    """The row's build flags alone, for the tiny model (hidden != 2048: its tiles never take the early path, so the
    row's NOEARLY_TILES change nothing there)."""
    return _row_keywords(name)["build_flags"]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a tensor (NaN-poisoned buffers compare equal where both are unwritten)."""
    return t.contiguous().view({4: torch.int32, 2: torch.int16, 8: torch.int64, 1: torch.uint8}[t.element_size()])


def _buffers(dec) -> dict[str, torch.Tensor]:
    """Every activation buffer of a decoder's state (not the weights), copied to the host."""
    from megakernel.state import BUFFER_NAMES

    return {n: dec.state.t[n].detach().cpu().clone() for n in BUFFER_NAMES}


def _differing_buffers(a: dict, b: dict) -> list[str]:
    return [n for n in a if not torch.equal(_bits(a[n]), _bits(b[n]))]


@pytest.mark.parametrize("name", CHAIN_ROWS)
def test_chain_row_matches_interpreter(name):
    weights = random_weights(get_config("tiny"), seed=SEED + 3, device="cuda")
    dec = _decoder(weights, tiles=TINY_TILES, build_flags=_row_flags(name))
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 4)).tolist()
    _assert_steps_match_interpreter(dec, prompt, name)


@pytest.mark.parametrize("name", CHAIN_ROWS)
def test_chain_row_equals_the_default_bit_for_bit_tiny(name):
    """36 steps in one launch (tiles of many steps in flight at once), every buffer equal to the default's."""
    weights = random_weights(get_config("tiny"), seed=SEED + 5, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 6)).tolist()
    states = {}
    for row, flags in (("default", ()), (name, _row_flags(name))):
        dec = _decoder(weights, tiles=TINY_TILES, build_flags=flags)
        dec.set_prompt(prompt)
        dec.run(0, 36)
        states[row] = _buffers(dec)
        del dec
    assert _differing_buffers(states["default"], states[name]) == []


def test_chain_rows_equal_the_default_bit_for_bit_full_model():
    """Full TinyLlama shapes (K = 2048: one whole 16-load block per lane in the batched loop), 40 steps in
    launches of 8: tokens, logits and every other buffer equal to the default binary's."""
    c = get_config("tinyllama-1.1b", max_seq=256)
    weights = random_weights(c, seed=SEED + 7, device="cuda")
    prompt = torch.randint(0, c.vocab, (8,), generator=torch.Generator().manual_seed(SEED + 8)).tolist()
    ref = _decoder(weights)
    want = ref.generate(prompt, n_new=32, chunk=8)
    ref_state = _buffers(ref)
    del ref
    torch.cuda.empty_cache()
    differs = {}
    for name in CHAIN_ROWS:
        dec = _decoder(weights, **_row_keywords(name))
        got = dec.generate(prompt, n_new=32, chunk=8)
        bad = _differing_buffers(ref_state, _buffers(dec))
        if got != want or bad:
            differs[name] = (got == want, bad)
        del dec
        torch.cuda.empty_cache()
    assert differs == {}, f"rows that differ from the default (tokens equal?, differing buffers): {differs}"


def _full_model_runs(name: str, seed: int) -> dict:
    """label -> (tokens, buffers) of the default binary and row `name`: full TinyLlama shapes, 40 steps in
    launches of 8."""
    c = get_config("tinyllama-1.1b", max_seq=256)
    weights = random_weights(c, seed=seed, device="cuda")
    prompt = torch.randint(0, c.vocab, (8,), generator=torch.Generator().manual_seed(seed + 1)).tolist()
    runs = {}
    for label, kw in (("default", {}), (name, _row_keywords(name))):
        dec = _decoder(weights, **kw)
        runs[label] = (dec.generate(prompt, n_new=32, chunk=8), _buffers(dec))
        del dec
        torch.cuda.empty_cache()
    return runs


@pytest.mark.parametrize("name", ("mk_dynamic",))
def test_ticket_rows_equal_the_default_bit_for_bit_full_model(name):
    """The ticket order (the counter vs the default's static SM-spread order) changes no value: every buffer
    equal to the default binary's."""
    runs = _full_model_runs(name, SEED + 11)
    assert runs[name][0] == runs["default"][0]
    assert _differing_buffers(runs["default"][1], runs[name][1]) == []


# Row 25 (NOTES.md; FUSION_K=vecbatch): the default's load_vector with all of a thread's loads issued before
# its stores (MK_VEC_BATCH) copies the same values as mk_vecserial's one load per trip, so every buffer equals
# the default binary's bit for bit: on the full model (Down's 5632 values: 5-6 slots per thread) and on tiny
# models whose ffn fills the slots in part (352), beyond them (6400: the one-at-a-time rest for threads 0-63)
# and at the largest ffn xs holds (8192).
def test_vecbatch_equals_the_default_bit_for_bit_full_model():
    runs = _full_model_runs("mk_vecserial", SEED + 21)
    assert runs["mk_vecserial"][0] == runs["default"][0]
    assert _differing_buffers(runs["default"][1], runs["mk_vecserial"][1]) == []


@pytest.mark.parametrize("ffn", [352, 6400, 8192])
def test_vecbatch_equals_the_default_bit_for_bit_tiny(ffn):
    weights = random_weights(get_config("tiny", ffn=ffn), seed=SEED + 23, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 24)).tolist()
    states = {}
    for row, flags in (("default", ()), ("mk_vecserial", _row_flags("mk_vecserial"))):
        dec = _decoder(weights, tiles=TINY_TILES, build_flags=flags)
        dec.set_prompt(prompt)
        dec.run(0, 36)
        states[row] = _buffers(dec)
        del dec
    assert _differing_buffers(states["default"], states["mk_vecserial"]) == []


# Ring rows (csrc/megakernel/ring.cuh; FUSION_K=ring): GEMV weights as bulk-copied 16 KiB pages. The ring
# needs rows of a multiple of 256 bf16 (the tiny model's 128 are not: its tiles would take the plain loop),
# so the interpreter check runs a small model whose every GEMV K is one. Its sums are per (row, warp) in a
# fixed order, not the plain loop's order: close to the default's, not bit-equal.
RING_ROWS = ("mk_ring2", "mk_ring4")
RING_CONFIG = dict(hidden=256, ffn=768, n_heads=8, n_kv_heads=2, head_dim=32, vocab=1024)


def _ring_row(name: str) -> dict:
    """The row's keywords but its tiles (the ring rows' are the full model's): ring_pages and the flag at 0 (the
    default's Down pieces, row 36, have no ring path)."""
    from benchmarks.decode import DOWN_PLAIN, variant_rows

    row = dict(variant_rows()[name])
    row.pop("tiles")
    assert row.keys() == {"ring_pages", "build_flags"} and row["build_flags"] == DOWN_PLAIN, f"{name}: {row}"
    return row


@pytest.mark.parametrize("name", RING_ROWS)
def test_ring_row_matches_interpreter(name):
    weights = random_weights(get_config("tiny", **RING_CONFIG), seed=SEED + 7, device="cuda")
    dec = _decoder(weights, tiles=TINY_TILES, **_ring_row(name))
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 8)).tolist()
    _assert_steps_match_interpreter(dec, prompt, name)


# Rows whose sums are not the default's order or whose tiles differ (ring pages; one CTA per SM with
# one-wave tiles, NOTES.md "Ready: row 19"; mk_nospread: the default before row 23, 32-feature gate/up tiles):
# the same forced sequence on the full model gives logits close to the default binary's.
FULL_MODEL_ROWS = RING_ROWS + ("mk_1cta_w128", "mk_1cta_w128_q4", "mk_nospread")


@pytest.mark.parametrize("name", FULL_MODEL_ROWS)
def test_row_logits_match_the_default_on_the_full_model(name):
    from benchmarks.decode import variant_rows

    c = get_config("tinyllama-1.1b", max_seq=256)
    weights = random_weights(c, seed=SEED + 9, device="cuda")
    prompt = torch.randint(0, c.vocab, (24,), generator=torch.Generator().manual_seed(SEED + 10)).tolist()
    logits = {}
    for label, kw in (("default", {}), (name, variant_rows()[name])):
        dec = _decoder(weights, **kw)
        dec.set_prompt(prompt)
        dec.run(0, len(prompt) - 1)  # every token forced: both decode the same sequence
        logits[label] = dec.state.t["logits"].detach().float().clone()
        del dec
    ref = logits["default"]
    err = (logits[name] - ref).abs().max().item() / ref.abs().max().item()
    assert err < 1e-3, f"{name}: logits differ from the default binary's by {err:.3g} (relative to max |logit|)"


# The SM spread (the default since row 23, NOTES.md; FUSION_K=spread): the default's static tickets go by a rank
# ordered by (slot on the SM, smid), mk_nospread's by the block index. Same tiles, same per-tile arithmetic: every
# buffer equal bit for bit; and the default's registration really spreads (ranks 0..S-1 on S distinct SMs).
NO_SPREAD = ("-DMK_SM_SPREAD=0",)


@pytest.mark.parametrize("workers", [None, 37])
def test_spread_default_matches_interpreter(workers):
    """36 launches of one step: a registration round in each (the host zeroes the area before each launch)."""
    weights = random_weights(get_config("tiny"), seed=SEED + 13, device="cuda")
    dec = _decoder(weights, tiles=TINY_TILES, workers=workers)
    assert dec.spread_words > 0
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 14)).tolist()
    _assert_steps_match_interpreter(dec, prompt, "default")


@pytest.mark.parametrize("workers", [None, 37])
def test_spread_default_equals_nospread_bit_for_bit_tiny(workers):
    weights = random_weights(get_config("tiny"), seed=SEED + 15, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 16)).tolist()
    states = {}
    for row, flags in (("default", ()), ("nospread", NO_SPREAD)):
        dec = _decoder(weights, tiles=TINY_TILES, workers=workers, build_flags=flags)
        dec.set_prompt(prompt)
        dec.run(0, 36)
        states[row] = _buffers(dec)
        del dec
    assert _differing_buffers(states["default"], states["nospread"]) == []


def test_spread_registration_puts_consecutive_ranks_on_distinct_sms():
    """After a launch of the default the area holds every worker's key (slot << 16 | smid): all arrived, keys
    unique, and the first min(SMs with a worker, 128) ranks (the keys in sorted order) sit on that many distinct
    SMs."""
    weights = random_weights(get_config("tiny"), seed=SEED + 17, device="cuda")
    dec = _decoder(weights, tiles=TINY_TILES)
    dec.set_prompt([1, 2])
    dec.run(0, 2)
    area = dec.ticket[1:].cpu().tolist()
    workers = dec.launch_info.workers
    from megakernel.runtime import kernel_limits

    keys = sorted(area[1 + kernel_limits()["SPREAD_SMS"]:][:workers])
    assert area[0] == workers and len(set(keys)) == workers
    sms = [k & 0xFFFF for k in keys]
    first = min(len(set(sms)), 128)
    assert len(set(sms[:first])) == first, f"ranks 0..{first - 1} on {len(set(sms[:first]))} SMs: {sms[:first]}"
    assert len(set(sms)) >= min(dec.launch_info.sms, workers) - 1  # the scheduler's SM may hold no worker only at 1 CTA/SM


@pytest.mark.parametrize("gate_features", [22, 32], ids=["default", "mk_g32-vs-mk_nospread"])
def test_spread_equals_nospread_bit_for_bit_full_model(gate_features):
    """Full TinyLlama shapes, 40 steps in launches of 8 (5 registration rounds): tokens and every buffer of the
    default build equal to the no-spread build's with the same tiles (the default's 22 features, and 32: mk_g32
    against mk_nospread)."""
    c = get_config("tinyllama-1.1b", max_seq=256)
    weights = random_weights(c, seed=SEED + 19, device="cuda")
    prompt = torch.randint(0, c.vocab, (8,), generator=torch.Generator().manual_seed(SEED + 20)).tolist()
    tiles = TileShape(gate_features=gate_features)
    runs = {}
    for label, flags in (("spread", ()), ("nospread", NO_SPREAD)):
        dec = _decoder(weights, tiles=tiles, build_flags=flags)
        runs[label] = (dec.generate(prompt, n_new=32, chunk=8), _buffers(dec))
        del dec
        torch.cuda.empty_cache()
    assert runs["spread"][0] == runs["nospread"][0]
    assert _differing_buffers(runs["nospread"][1], runs["spread"][1]) == []


# Row 26 (NOTES.md "Ready: row 26"; FUSION_K=lastcombine): the combine once per KV-head group, by the group's last
# arrival (csrc/megakernel/megakernel.cu: attn_arrive, attention.cuh: combine_group), O-proj loads attn_out.
LAST_TINY = dataclasses.replace(TINY_TILES, last_combine=True)


def _arrivals(dec) -> torch.Tensor:
    arrive = [i for i, n in enumerate(dec.program.counters) if n.startswith("attn_arrive")]
    return dec.state.t["counters"][arrive]


@pytest.mark.parametrize("workers", [None, 37])
def test_lastcombine_matches_interpreter(workers):
    """36 one-step launches (positions 0..35: up to 3 used splits of 16), each step localised."""
    weights = random_weights(get_config("tiny"), seed=SEED + 21, device="cuda")
    dec = _decoder(weights, tiles=LAST_TINY, workers=workers)
    assert "-DMK_LAST_COMBINE=1" in dec.build_flags and "attn_out" in dec.state.t
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 22)).tolist()
    _assert_steps_match_interpreter(dec, prompt, "mk_lastcombine")
    per_group = LAST_TINY.n_splits(weights.config) * LAST_TINY.head_parts(weights.config)
    assert (_arrivals(dec) == 36 * per_group).all()  # every tile arrived, empty splits too


def _logits_error(a: dict, b: dict) -> float:
    return ((a["logits"] - b["logits"]).abs().max() / b["logits"].abs().max()).item()


def _same_launches(weights, prompt, launches, rows: dict, read) -> dict:
    """read(decoder) of each row (label: MegakernelDecoder keyword arguments) after the same launches (first, count)
    from the prompt; one decoder at a time, freed before the next (full-model rows do not fit together)."""
    states = {}
    for row, kw in rows.items():
        dec = _decoder(weights, **kw)
        dec.set_prompt(prompt)
        for first, count in launches:
            dec.run(first, count)
        states[row] = read(dec)
        del dec
        torch.cuda.empty_cache()
    return states


def _launches_to(kv: int) -> list[tuple[int, int]]:
    """Launches of up to 64 steps that force every token of the prompt up to KV position kv + 2."""
    return [(first, min(64, kv + 3 - first)) for first in range(0, kv + 3, 64)]


def _assert_flag_row_is_its_tiles_bit_for_bit(row_name: str, flags: tuple[str, ...], kv: int, seed: int) -> None:
    """Full TinyLlama, every token forced up to KV position kv + 2: decode.py's row (its tiles + a build flag that
    must not change any value) leaves every buffer bit for bit as the same tiles without the flag."""
    from benchmarks.decode import variant_rows

    row = variant_rows()[row_name]
    assert row.get("build_flags", ()) == flags  # () for a row of decoder keywords alone (row 45's prefetch_gate)
    _assert_full_model_bit_for_bit({"tiles": row["tiles"]}, row, kv, seed, row_name)


def _assert_full_model_bit_for_bit(plain: dict, flag: dict, kv: int, seed: int, label: str) -> None:
    """Full TinyLlama, every token forced up to KV position kv + 2: the decoder of keywords ``flag`` leaves every
    buffer bit for bit as the decoder of ``plain`` (the same launches)."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=seed, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(seed + 1)).tolist()
    states = _same_launches(weights, prompt, _launches_to(kv), {"plain": plain, "flag": flag}, _buffers)
    assert _differing_buffers(states["flag"], states["plain"]) == [], f"{label} kv {kv}"


def _assert_flag_equals_plain_tiny(tiles, flags: tuple[str, ...], seed: int, flag_tiles=None, **more) -> None:
    """Tiny model, launches across the one-split, 16- and 32-position programs (of multi-step and one-step lengths):
    every buffer bit for bit as the same tiles without the flags (and without the decoder keywords ``more``; the
    flagged decoder runs ``flag_tiles`` where given, e.g. the early_regs rows)."""
    weights = random_weights(get_config("tiny"), seed=seed, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (6,), generator=torch.Generator().manual_seed(seed + 1)).tolist()
    launches = [(0, 8), (8, 4), (12, 8), (20, 16), (36, 4), (40, 24)]
    flag = {"tiles": tiles if flag_tiles is None else flag_tiles, "build_flags": flags, **more}
    states = _same_launches(weights, prompt, launches, {"plain": {"tiles": tiles}, "flag": flag}, _buffers)
    assert _differing_buffers(states["flag"], states["plain"]) == []


def _named_buffers(dec) -> dict[str, torch.Tensor]:
    """_buffers with the counters by name: mk_lastcombine has the arrival counters besides the default's."""
    out = _buffers(dec)
    counters = out.pop("counters")
    out.update({f"counter {n}": counters[i] for i, n in enumerate(dec.program.counters) if not n.startswith("attn_arrive")})
    return out


@pytest.mark.parametrize("workers", [None, 37])
def test_lastcombine_equals_the_default_bit_for_bit_tiny(workers):
    """36 steps in one launch (many steps' tiles in flight): every buffer equal to the default's."""
    weights = random_weights(get_config("tiny"), seed=SEED + 23, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 24)).tolist()
    states = {}
    for row, tiles in (("default", TINY_TILES), ("last", LAST_TINY)):
        dec = _decoder(weights, tiles=tiles, workers=workers)
        dec.set_prompt(prompt)
        dec.run(0, 36)
        states[row] = _named_buffers(dec)
        del dec
    assert _logits_error(states["last"], states["default"]) < 1e-3
    assert set(states["default"]) == set(states["last"])
    assert _differing_buffers(states["default"], states["last"]) == []


@pytest.mark.parametrize("kv", [128, 1024])
def test_lastcombine_equals_the_default_on_the_full_model(kv):
    """Full TinyLlama, every token forced up to KV position kv + 2 (2 or 9 used splits of 128; launches of 64 steps):
    logits within 1e-3 of max |logit| of the default's, then tokens and every buffer bit for bit."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 25, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 26)).tolist()
    rows = {"default": {"tiles": TileShape()}, "last": {"tiles": TileShape(last_combine=True)}}
    states = _same_launches(weights, prompt, _launches_to(kv), rows, _named_buffers)
    err = _logits_error(states["last"], states["default"])
    assert err < 1e-3, f"kv {kv}: mk_lastcombine's logits differ from the default's by {err:.3g} of max |logit|"
    assert _differing_buffers(states["default"], states["last"]) == [], f"kv {kv}: logits error {err:.3g}"


# A group of 8 heads of 64 dims with 32 splits of 16 positions: up to 15 used splits fit combine_group's shared-memory
# copy, from position 240 on the combine loads the outputs from L2 after the weights (the fallback path).
WIDE_GROUP = dict(n_heads=8, n_kv_heads=1, head_dim=64, hidden=512, max_seq=512)


def test_lastcombine_both_combine_paths_equal_the_default():
    """300 steps (used splits 1..19: the staged combine, then the fallback), the same launches for both builds: every
    buffer equal to the default's; mk_lastcombine's step 290 (19 used splits) against the interpreter."""
    weights = random_weights(get_config("tiny", **WIDE_GROUP), seed=SEED + 27, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (301,), generator=torch.Generator().manual_seed(SEED + 28)).tolist()
    states = {}
    for row, tiles in (("default", TINY_TILES), ("last", LAST_TINY)):
        dec = _decoder(weights, tiles=tiles)
        dec.set_prompt(prompt)
        for first in range(0, 290, 64):
            dec.run(first, min(64, 290 - first))
        before = dec.state.clone()
        dec.run(290, 1)
        if row == "last":
            wrong = localise(before, dec.state, 290, n_forced=len(prompt), rtol=5e-3, device="cuda")
            assert wrong is None, f"mk_lastcombine step 290: first instruction that differs from the interpreter: {wrong}"
        dec.run(291, 9)
        states[row] = _named_buffers(dec)
        del dec, before
    assert _logits_error(states["last"], states["default"]) < 1e-3
    assert _differing_buffers(states["default"], states["last"]) == []


# Row 27 (NOTES.md "Ready: row 27"; FUSION_K=adaptive): one binary with both combines (MK_LAST_COMBINE=2), each launch
# running the O-proj combine while its largest KV length is <= TileShape.combine_threshold, the last arrival above.
AUTO_TINY = dataclasses.replace(TINY_TILES, last_combine="auto", combine_threshold=20)


@pytest.mark.parametrize("workers", [None, 37])
def test_adaptive_matches_interpreter(workers):
    """36 one-step launches: steps 0..19 (KV lengths <= 20) in the O-proj form (attn_out never written: still NaN),
    20..35 by the last arrival, each step localised in its launch's form; only those 16 steps arrived."""
    weights = random_weights(get_config("tiny"), seed=SEED + 29, device="cuda")
    dec = _decoder(weights, tiles=AUTO_TINY, workers=workers)
    assert "-DMK_LAST_COMBINE=2" in dec.build_flags and "attn_out" in dec.state.t
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 30)).tolist()

    def o_proj_form_so_far(step: int) -> None:
        if step == 19:
            assert torch.isnan(dec.state.t["attn_out"]).all() and (_arrivals(dec) == 0).all()

    _assert_steps_match_interpreter(dec, prompt, "mk_adaptive_combine", after_step=o_proj_form_so_far)
    per_group = AUTO_TINY.n_splits(weights.config) * AUTO_TINY.head_parts(weights.config)
    assert (_arrivals(dec) == 16 * per_group).all()




@pytest.mark.parametrize("workers", [None, 37])
def test_adaptive_equals_the_default_bit_for_bit_tiny(workers):
    """Launches ending at 12 and at the threshold 20 (O-proj form), then one of 16 steps (last arrival, many steps in
    flight): every buffer equal to the default's after the same launches."""
    weights = random_weights(get_config("tiny"), seed=SEED + 31, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 32)).tolist()
    states = {}
    for row, tiles in (("default", TINY_TILES), ("auto", AUTO_TINY)):
        dec = _decoder(weights, tiles=tiles, workers=workers)
        dec.set_prompt(prompt)
        for first, count in ((0, 12), (12, 8), (20, 16)):
            dec.run(first, count)
        states[row] = _named_buffers(dec)
        if row == "auto":
            per_group = AUTO_TINY.n_splits(weights.config) * AUTO_TINY.head_parts(weights.config)
            assert (_arrivals(dec) == 16 * per_group).all()
        del dec
    assert _logits_error(states["auto"], states["default"]) < 1e-3
    assert _differing_buffers(states["default"], states["auto"]) == []


@pytest.mark.parametrize("kv", [128, 1024])
def test_adaptive_equals_the_default_on_the_full_model(kv):
    """Full TinyLlama, the default threshold (512), launches of 64 steps to KV position kv + 2: at kv 128 all of the
    O-proj form (no arrival), at kv 1024 the launch ending at 512 still O-proj, those after by the last arrival; logits
    within 1e-3 of max |logit| of the default's, then tokens and every buffer bit for bit."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 33, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 34)).tolist()
    launches = _launches_to(kv)
    auto = TileShape(last_combine="auto")
    states = _same_launches(weights, prompt, launches, {"default": {"tiles": TileShape()}, "auto": {"tiles": auto}},
                            lambda dec: (_named_buffers(dec), _arrivals(dec).cpu()))
    err = _logits_error(states["auto"][0], states["default"][0])
    assert err < 1e-3, f"kv {kv}: mk_adaptive_combine's logits differ from the default's by {err:.3g} of max |logit|"
    assert _differing_buffers(states["default"][0], states["auto"][0]) == [], f"kv {kv}: logits error {err:.3g}"
    last_steps = sum(n for first, n in launches if auto.combine_last_at(first + n))
    assert last_steps == (0 if kv == 128 else kv + 3 - 512)
    assert (states["auto"][1] == last_steps * auto.n_splits(c) * auto.head_parts(c)).all()


# Row 32 (NOTES.md "Ready: row 32", "Row 32 measured"; FUSION_K=attn_v): MK_ATTN_V2=1, the default since its H200
# run, AttnPartial tiles of 1-2 query heads with the softmax and PV per lane in registers (an online softmax: fp32
# sums in another order), against its control mk_attn_v1 (MK_ATTN_V2=0, the three-pass tile). Both against the
# interpreter (tiny model, 2 and 1 heads per tile, 2 worker counts), and against each other on the full model at KV
# positions ~128 and ~1024: logits within 1e-3 of max |logit|, the partials close and NaN-free where v1's are.
ATTN_V1_FLAGS = ("-DMK_ATTN_V2=0",)


@pytest.mark.parametrize("flags", [(), ATTN_V1_FLAGS], ids=["v2", "v1"])
@pytest.mark.parametrize("head_parts", [1, 2], ids=["2heads", "1head"])
@pytest.mark.parametrize("workers", [None, 37])
def test_attn_v_matches_interpreter(head_parts, workers, flags):
    assert _row_flags("mk_attn_v1") == ATTN_V1_FLAGS
    weights = random_weights(get_config("tiny"), seed=SEED + 35, device="cuda")
    tiles = dataclasses.replace(TINY_TILES, attn_head_parts=head_parts)
    dec = _decoder(weights, tiles=tiles, workers=workers, build_flags=flags)
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 36)).tolist()
    _assert_steps_match_interpreter(dec, prompt, f"attention {flags or 'v2'} head_parts={head_parts}")


def _partials_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| over the entries b holds (written partials), relative to max |b| there; NaN where a is not
    written where b is."""
    written = torch.isfinite(b)
    if not torch.isfinite(a[written]).all():
        return float("nan")
    return ((a[written] - b[written]).abs().max() / b[written].abs().max()).item()


@pytest.mark.parametrize("kv", [128, 1024])
def test_attn_v2_matches_v1_on_the_full_model(kv):
    """Full TinyLlama, every token forced up to KV position kv + 2 (launches of 64 steps), 2 and 9 used splits."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 37, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 38)).tolist()
    rows = {"v1": {"build_flags": ATTN_V1_FLAGS}, "v2": {}}
    states = _same_launches(weights, prompt, _launches_to(kv), rows, _buffers)
    err = _logits_error(states["v2"], states["v1"])
    assert err < 1e-3, f"kv {kv}: v2's logits differ from mk_attn_v1's by {err:.3g} of max |logit|"
    # Layer 0's K/V cache and q are the same bits in both runs (nothing upstream of them changed), so its partials
    # compare the two attention tiles alone: only the fp32 sums' order differs. Later layers see earlier layers'
    # rounding differences through the bf16 K/V cache (one flipped bf16 rounding is 4e-3 of an element), so their
    # partials are held to the propagated bound the logits check above already implies.
    for cache in ("k_cache", "v_cache"):
        assert torch.equal(_bits(states["v2"][cache][0]), _bits(states["v1"][cache][0])), f"layer 0's {cache}"
    part0 = _partials_error(states["v2"]["attn_part"][0], states["v1"]["attn_part"][0])
    assert part0 < 1e-4, f"kv {kv}: layer 0's attention partials (o, m, l) differ by {part0:.3g} of their max"
    part = _partials_error(states["v2"]["attn_part"], states["v1"]["attn_part"])
    assert part < 1e-2, f"kv {kv}: attention partials (o, m, l) differ by {part:.3g} of their max"


# Row 35 (NOTES.md "Ready: row 35"; FUSION_K=split_auto; TileShape(attn_split_long=256), benchmarks/decode.py
# mk_split_auto): the default binary, each launch's attention split length by its largest KV length (attn_split up to
# TileShape.split_threshold, attn_split_long above), on one state laid out for the short split's slots; the runtime
# points the parameter block at that split's list and sets the attention counters to step_begin x its tiles per layer.
SPLIT_AUTO_TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20)


def _attn_counts(dec) -> torch.Tensor:
    attn = [i for i, n in enumerate(dec.program.counters) if n.startswith("attn[")]
    return dec.state.t["counters"][attn].cpu()


@pytest.mark.parametrize("workers", [None, 37])
def test_split_auto_matches_interpreter(workers):
    """36 one-step launches: steps 0..19 (KV lengths <= 20) with 16-position splits, 20..35 with 32-position splits
    (the switch at step 20), each step localised in its launch's split; attn[L] counts each launch's own tiles."""
    weights = random_weights(get_config("tiny"), seed=SEED + 39, device="cuda")
    dec = _decoder(weights, tiles=SPLIT_AUTO_TINY, workers=workers)
    assert dec.build_flags == ()  # the default's build flags: its (cached) cubin
    c = weights.config
    per_layer = {s: c.n_kv_heads * SPLIT_AUTO_TINY.head_parts(c) * -(-c.max_seq // s) for s in (16, 32)}
    prompt = torch.randint(0, c.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 40)).tolist()

    def counted(step: int) -> None:
        want = (step + 1) * per_layer[16 if step + 1 <= 20 else 32]
        assert (_attn_counts(dec) == want).all(), f"step {step}: attn counters {_attn_counts(dec)}, want {want}"

    _assert_steps_match_interpreter(dec, prompt, "mk_split_auto", after_step=counted)


@pytest.mark.parametrize("workers", [None, 37])
def test_split_auto_multistep_launches_match_interpreter(workers):
    """Launches ending at 12 and at the threshold 20 (16-position splits), then one of 16 steps (32-position splits,
    many steps in flight), then 4 more: logits within 1e-3 of max |logit| of the interpreter's after the same
    launches, the same tokens (steps 10.. sample on the device) and the same counters."""
    from megakernel.interpreter import Interpreter
    from megakernel.state import DecodeState

    weights = random_weights(get_config("tiny"), seed=SEED + 41, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 42)).tolist()
    dec = _decoder(weights, tiles=SPLIT_AUTO_TINY, workers=workers)
    dec.set_prompt(prompt)
    ref = DecodeState.create(dec.program, weights, device="cuda")
    ref.set_prompt(prompt)
    interp = Interpreter(ref, n_forced=len(prompt))
    for first, count in ((0, 12), (12, 8), (20, 16), (36, 4)):
        dec.run(first, count)
        interp.run_steps(first, count)
        got, want = _buffers(dec), {n: ref.t[n].cpu() for n in ("logits", "tokens", "counters")}
        err = _logits_error(got, want)
        assert err < 1e-3, f"launch ending at {first + count}: logits differ by {err:.3g} of max |logit|"
        assert torch.equal(got["tokens"], want["tokens"]), f"launch ending at {first + count}: tokens"
        assert torch.equal(got["counters"], want["counters"]), f"launch ending at {first + count}: counters"


@pytest.mark.parametrize("kv", [128, 1024])
def test_split_auto_equals_the_default_on_the_full_model(kv):
    """Full TinyLlama, the default threshold (512), every token forced up to KV position kv + 2 (launches of 64 steps).
    kv 128: every launch ends at <= 131, so the default's program and parameters: every buffer bit for bit. kv 1024:
    from the launch ending at 576 on, 256-position splits (5 of the 9 slots used at most); logits within 1e-3 of max
    |logit| of the default's and of mk_split256's, layer 0's K/V cache the same bits, attn[L] at 1027 x 80 tiles."""
    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 43, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 44)).tolist()
    launches = _launches_to(kv)
    auto = TileShape(attn_split_long=256)
    rows = {"default": {"tiles": TileShape()}, "auto": {"tiles": auto}}
    if kv == 1024:
        rows["split256"] = {"tiles": TileShape(attn_split=256)}
    states = _same_launches(weights, prompt, launches, rows, lambda dec: (_named_buffers(dec), _attn_counts(dec)))
    err = _logits_error(states["auto"][0], states["default"][0])
    assert err < 1e-3, f"kv {kv}: mk_split_auto's logits differ from the default's by {err:.3g} of max |logit|"
    long_steps = sum(n for first, n in launches if auto.split_at(first + n) == 256)
    if kv == 128:
        assert long_steps == 0
        assert _differing_buffers(states["default"][0], states["auto"][0]) == [], f"kv {kv}: logits error {err:.3g}"
        return
    assert long_steps == kv + 3 - 512
    err256 = _logits_error(states["auto"][0], states["split256"][0])
    assert err256 < 1e-3, f"kv {kv}: mk_split_auto's logits differ from mk_split256's by {err256:.3g} of max |logit|"
    for cache in ("k_cache", "v_cache"):
        assert torch.equal(_bits(states["auto"][0][cache][0]), _bits(states["default"][0][cache][0])), cache
    assert (states["auto"][1] == (kv + 3) * c.n_kv_heads * 5 * 4).all(), states["auto"][1]
    assert (states["default"][1] == (kv + 3) * c.n_kv_heads * 9 * 4).all(), states["default"][1]


# Row 36 (NOTES.md "Ready: row 36", "Row 36 measured"; FUSION_K=down_pieces), the default since its H200 run:
# MK_DOWN_PIECES=1, Down tiles in which each warp streams one row's two K-halves (gemv.cuh: gemv_tile_pieces), with
# DEFAULT_TILES' 8-row Down tiles; mk_down8_ctl: MK_DOWN_PIECES=2, the same code with warps 0-3 only; mk_down16: the
# default before it (16-row tiles through gemv_tile, the flag at 0). Each build against the interpreter on the tiny
# model (8-row tiles, and 16-row tiles: two rows per warp in turn), and the default against mk_down16 on the full model
# at KV ~128 and ~1024: logits within 1e-3 of max |logit|, layer 0's Down output within fp32 reordering, and the
# default and mk_down8_ctl bit for bit equal (every row summed by the same lanes in the same order, whichever warp
# takes it).
DOWN_PIECES_ROWS = ("default", "mk_down8_ctl", "mk_down16")


@pytest.mark.parametrize("name", DOWN_PIECES_ROWS)
@pytest.mark.parametrize("down_rows", [8, 16])
@pytest.mark.parametrize("workers", [None, 37])
def test_down_pieces_match_interpreter(name, down_rows, workers):
    from benchmarks.decode import variant_rows

    flags = variant_rows()[name]["build_flags"] if name != "default" else ()
    weights = random_weights(get_config("tiny"), seed=SEED + 45, device="cuda")
    tiles = dataclasses.replace(TINY_TILES, down_rows=down_rows)
    dec = _decoder(weights, tiles=tiles, workers=workers, build_flags=flags)
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 46)).tolist()
    _assert_steps_match_interpreter(dec, prompt, f"{name} down_rows={down_rows}")


@pytest.mark.parametrize("kv", [128, 1024])
def test_down_pieces_match_the_default_on_the_full_model(kv):
    """Full TinyLlama, every token forced up to KV position kv + 2 (launches of 64 steps), the rows as decode.py runs
    them: the default (256 Down tiles of 8 rows in pieces, its split choice) against mk_down16 (the default before row
    36: 128 tiles of 16 through gemv_tile) and mk_down8_ctl (the default's tiles, 4 warps per CTA)."""
    from benchmarks.decode import variant_rows

    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 47, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 48)).tolist()
    # "default": the default of row 36 (mk_combine, the tiles mk_down8_ctl and mk_down16 were measured against)
    rows = {"default": variant_rows()["mk_combine"], **{name: variant_rows()[name] for name in ("mk_down16", "mk_down8_ctl")}}
    states = _same_launches(weights, prompt, _launches_to(kv), rows, _buffers)
    err = _logits_error(states["default"], states["mk_down16"])
    assert err < 1e-3, f"kv {kv}: the default's logits differ from mk_down16's by {err:.3g} of max |logit|"
    # Layer 0's inputs to Down are the same bits (nothing upstream changed), so its output x[1] differs by the
    # reordered fp32 sums alone.
    for name in ("x_mid", "h"):
        assert torch.equal(_bits(states["default"][name][0]), _bits(states["mk_down16"][name][0])), name
    x1, ref = states["default"]["x"][1], states["mk_down16"]["x"][1]
    x1_err = ((x1 - ref).abs().max() / ref.abs().max()).item()
    assert x1_err < 1e-5, f"kv {kv}: layer 0's Down output differs by {x1_err:.3g} of its max"
    assert _differing_buffers(states["default"], states["mk_down8_ctl"]) == [], f"kv {kv}: pieces vs ctl"


# Row 38 (NOTES.md "Ready: rows 38-39"; FUSION_K=gemv_batches; benchmarks/decode.py mk_o_pieces), on top of row 36
# (MK_DOWN_PIECES=1): O-proj rows streamed through gemv_batches (gemv.cuh), every load of a batch before its first
# FFMA, 8-row O-proj tiles, one row a warp (row 39's mk_down_body, Down through it, was removed in session 15).
# Against the interpreter on the tiny model (O-proj K 128: lanes past the row's chunks with every load predicated off;
# 8- and 16-row tiles, 2 worker counts), and against mk_down_pieces on the full model at KV ~128 and ~1024: logits
# within 1e-3 of max |logit|, then every buffer bit for bit. Why bit for bit: one piece sums a row's chunks on the same
# lanes in the same order as gemv_rows (O-proj in mk_down_pieces), and the warp sums are the same
# (tests/test_megakernel_gemv_batches.py checks the index math); the only buffer that differs is mk_o_pieces' o[L]
# counters, 256 O-proj tiles per layer and step instead of 128. At KV ~128 one more build runs batches that do not
# cover a row at once (MK_O_TRIPS=3: 3 + 3 + 2 of 3): the same bits.
GEMV_BATCH_ROWS = ("mk_o_pieces",)


@pytest.mark.parametrize("name", GEMV_BATCH_ROWS)
@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("workers", [None, 37])
def test_gemv_batches_match_interpreter(name, rows, workers):
    from benchmarks.decode import variant_rows

    flags = variant_rows()[name]["build_flags"]
    weights = random_weights(get_config("tiny"), seed=SEED + 49, device="cuda")
    shape = {"o_rows": rows, "down_rows": 8}
    dec = _decoder(weights, tiles=dataclasses.replace(TINY_TILES, **shape), workers=workers, build_flags=flags)
    prompt = torch.randint(0, weights.config.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 50)).tolist()
    _assert_steps_match_interpreter(dec, prompt, f"{name} {shape}")


@pytest.mark.parametrize("kv", [128, 1024])
def test_gemv_batches_equal_down_pieces_on_the_full_model(kv):
    """Full TinyLlama, every token forced up to KV position kv + 2 (launches of 64 steps), the rows as decode.py runs
    them against mk_down_pieces: logits within 1e-3 of max |logit|, then every buffer bit for bit (o[L] counters: 2x)."""
    from benchmarks.decode import variant_rows

    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 51, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 52)).tolist()
    rows = {name: variant_rows()[name] for name in ("mk_down_pieces",) + GEMV_BATCH_ROWS}
    if kv == 128:
        for name, flag in (("mk_o_pieces", "-DMK_O_TRIPS=3"),):
            row = rows[name]
            rows[f"{name} {flag}"] = {**row, "build_flags": tuple(row["build_flags"]) + (flag,)}
    states = _same_launches(weights, prompt, _launches_to(kv), rows, _named_buffers)
    ref = states.pop("mk_down_pieces")
    o_counters = [n for n in ref if n.startswith("counter o[")]
    assert len(o_counters) == c.n_layers
    for name, got in states.items():
        err = _logits_error(got, ref)
        assert err < 1e-3, f"kv {kv}: {name}'s logits differ from mk_down_pieces' by {err:.3g} of max |logit|"
        if name.startswith("mk_o_pieces"):
            for n in o_counters:
                assert torch.equal(got[n], 2 * ref[n]), f"kv {kv}: {name} {n}: {got[n]} vs {ref[n]}"
            got = {n: v for n, v in got.items() if n not in o_counters}
        assert set(got) <= set(ref)
        assert _differing_buffers(got, ref) == [], f"kv {kv}: {name} (logits error {err:.3g})"


# Row 40 (NOTES.md "Ready: row 40"; FUSION_K=one_split; TileShape(single_split=N), build flag MK_ONE_SPLIT=1 through
# option_flags, benchmarks/decode.py mk_one_split): a launch whose largest KV length is <= single_split runs one split
# per head, whose AttnPartial tiles write the normalised output to attn_out and O-proj loads it (no combine); longer
# launches run the default's programs. Against the interpreter on the tiny model in one-step launches of all three
# programs (one split, then 16- and 32-position splits) and in multi-step launches across the switches, and on the full
# model at KV ~128 (every launch one-split: bit for bit mk_split256's buffers but the partials and attn[L] counters,
# since a one-split tile's o * (1 / l) is the one-split combine's arithmetic) and ~1024 (the launches ending at <= 256
# one-split, the later ones the default's programs): logits within 1e-3 of max |logit| of the default's, and layer 0's
# buffers the default's bits (layer 0's K/V come from the embeddings alone, and its last step runs the default's words
# on them; layers >= 1 differ: the early one-split launches' attention summed another way into their K/V caches).
ONE_SPLIT_TINY = dataclasses.replace(TINY_TILES, attn_split_long=32, split_threshold=20, single_split=12)


@pytest.mark.parametrize("workers", [None, 37])
def test_one_split_matches_interpreter(workers):
    """36 one-step launches: steps 0..11 one-split (attn_out written, no partial), 12..19 16-position splits, 20..35
    32-position splits, each step localised in its launch's program; attn[L] counts each launch's own tiles."""
    weights = random_weights(get_config("tiny"), seed=SEED + 61, device="cuda")
    dec = _decoder(weights, tiles=ONE_SPLIT_TINY, workers=workers)
    assert dec.build_flags == ("-DMK_ONE_SPLIT=1",) and "attn_out" in dec.state.t
    c = weights.config
    per_layer = {12: c.n_kv_heads * ONE_SPLIT_TINY.head_parts(c)}
    per_layer |= {s: c.n_kv_heads * ONE_SPLIT_TINY.head_parts(c) * -(-c.max_seq // s) for s in (16, 32)}
    prompt = torch.randint(0, c.vocab, (10,), generator=torch.Generator().manual_seed(SEED + 62)).tolist()

    def counted(step: int) -> None:
        split = ONE_SPLIT_TINY.split_at(step + 1)
        want = (step + 1) * per_layer[split]
        assert (_attn_counts(dec) == want).all(), f"step {step}: attn counters {_attn_counts(dec)}, want {want}"
        if step == 11:
            assert torch.isnan(dec.state.t["attn_part"]).all() and not torch.isnan(dec.state.t["attn_out"]).any()

    _assert_steps_match_interpreter(dec, prompt, "mk_one_split", after_step=counted)


@pytest.mark.parametrize("workers", [None, 37])
def test_one_split_multistep_launches_match_interpreter(workers):
    """Launches ending at 8 and 12 (one split, many steps in flight), 20 (16-position splits), 36 (32) and 40: logits
    within 1e-3 of max |logit| of the interpreter's after the same launches, the same tokens and counters."""
    from megakernel.interpreter import Interpreter
    from megakernel.state import DecodeState

    weights = random_weights(get_config("tiny"), seed=SEED + 63, device="cuda")
    prompt = torch.randint(0, weights.config.vocab, (6,), generator=torch.Generator().manual_seed(SEED + 64)).tolist()
    dec = _decoder(weights, tiles=ONE_SPLIT_TINY, workers=workers)
    dec.set_prompt(prompt)
    ref = DecodeState.create(dec.program, weights, device="cuda")
    ref.set_prompt(prompt)
    interp = Interpreter(ref, n_forced=len(prompt))
    for first, count in ((0, 8), (8, 4), (12, 8), (20, 16), (36, 4)):
        dec.run(first, count)
        interp.run_steps(first, count)
        got, want = _buffers(dec), {n: ref.t[n].cpu() for n in ("logits", "tokens", "counters")}
        err = _logits_error(got, want)
        assert err < 1e-3, f"launch ending at {first + count}: logits differ by {err:.3g} of max |logit|"
        assert torch.equal(got["tokens"], want["tokens"]), f"launch ending at {first + count}: tokens"
        assert torch.equal(got["counters"], want["counters"]), f"launch ending at {first + count}: counters"


@pytest.mark.parametrize("row", ["mk_one_split", "mk_one_split_o8"])
@pytest.mark.parametrize("kv", [128, 1024])
def test_one_split_against_the_default_on_the_full_model(kv, row):
    """Full TinyLlama, every token forced up to KV position kv + 2 (launches of 64 steps), the rows as decode.py runs
    them. kv 128: every launch ends at <= 131, all one-split: logits within 1e-3 of the default's; every buffer but
    attn_part and the counters the bits of mk_split256's (mk_one_split_o8: of mk_o_pieces with 256-position splits,
    the same O-proj stream), attn[L] at 131 x 16. kv 1024: the launches ending at 64..256 one-split, the rest the
    default's words: logits within 1e-3, layer 0's buffers (x[0], q, K/V cache, partials, x_mid, h, x[1]) and the
    tokens the default's bits, attn[L] at 1027 x 80 (the last launch's 256-position splits, as the default's)."""
    from benchmarks.decode import variant_rows

    c = get_config("tinyllama-1.1b", max_seq=1152)
    weights = random_weights(c, seed=SEED + 65, device="cuda")
    prompt = torch.randint(0, c.vocab, (kv + 4,), generator=torch.Generator().manual_seed(SEED + 66)).tolist()
    launches = _launches_to(kv)
    kw = variant_rows()[row]
    tiles = kw["tiles"]
    rows = {"default": variant_rows()["mk_combine"], row: kw}  # the default before rows 40 + 42 (the combine)
    if kv == 128:  # the same attention split and O-proj code with the combine: mk_split256 (or its O-proj pieces)
        rows["split256"] = {**kw, "tiles": dataclasses.replace(tiles, attn_split=256, attn_split_long=0, single_split=0)}
    one_steps = sum(n for first, n in launches if tiles.one_split_at(first + n))
    assert one_steps == (kv + 3 if kv == 128 else 256)
    states = _same_launches(weights, prompt, launches, rows, lambda dec: (_buffers(dec), _attn_counts(dec)))
    err = _logits_error(states[row][0], states["default"][0])
    assert err < 1e-3, f"kv {kv}: {row}'s logits differ from the default's by {err:.3g} of max |logit|"
    got = states[row][0]
    if kv == 128:
        ref = states["split256"][0]
        skip = {"attn_part", "counters"}
        assert _differing_buffers({n: v for n, v in got.items() if n not in skip}, ref) == [], f"kv {kv}"
        assert (states[row][1] == (kv + 3) * c.n_kv_heads * 4).all(), states[row][1]
        return
    ref = states["default"][0]
    for name in ("q", "k_cache", "v_cache", "attn_part", "x_mid", "h"):
        assert torch.equal(_bits(got[name][0]), _bits(ref[name][0])), f"layer 0 {name}"
    for name, layer in (("x", 0), ("x", 1)):
        assert torch.equal(_bits(got[name][layer]), _bits(ref[name][layer])), f"{name}[{layer}]"
    assert torch.equal(got["tokens"], ref["tokens"])
    assert (states[row][1] == (kv + 3) * c.n_kv_heads * 5 * 4).all(), states[row][1]
