"""Instruction encoding: Python dataclasses vs the C++ header, round trips, bad input."""
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megakernel import instructions as I
from megakernel.params import PARAM_BYTES, PARAM_FIELDS, pack_params, params_header

HEADER = Path(__file__).resolve().parent.parent / "csrc" / "megakernel" / "opcodes.cuh"


def _cpp_enum(name: str) -> dict[str, int]:
    text = HEADER.read_text()
    body = re.search(r"enum " + name + r"\s*:\s*int\s*\{(.*?)\};", text, re.S).group(1)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"(\w+)\s*=\s*(-?\d+)", body)}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def test_python_and_cpp_opcodes_agree():
    cpp = _cpp_enum("Opcode")
    # Class name -> enum name: Embed -> OP_EMBED, QkvHead -> OP_QKV_HEAD, OProj -> OP_O_PROJ, ...
    py = {"OP_" + _snake(cls.__name__): cls.OPCODE for cls in I.INSTRUCTION_TYPES}
    assert cpp == py


def test_word_indices_and_constants_agree():
    cpp = _cpp_enum("InstrWord")
    py = {name: getattr(I, name) for name in dir(I) if re.fullmatch(r"W_[A-Z0-9_]+", name)}
    assert cpp == py
    text = HEADER.read_text()
    assert int(re.search(r"#define INSTR_WORDS (\d+)", text).group(1)) == I.WORDS
    assert int(re.search(r"#define NO_COUNTER \((-?\d+)\)", text).group(1)) == I.NO_COUNTER
    assert _cpp_enum("HeadKind") == {"HEAD_Q": I.HEAD_Q, "HEAD_K": I.HEAD_K, "HEAD_V": I.HEAD_V}


_int32 = st.integers(-(2**31), 2**31 - 1)
_instr = st.one_of(*[
    st.builds(cls, layer=_int32, wait=_int32, wait_count=_int32, wait_delta=_int32, signal=st.integers(0, 2**31 - 1),
              **{name: _int32 for name in cls.ARGS})
    for cls in I.INSTRUCTION_TYPES
])


@given(_instr)
def test_serialize_round_trip(ins):
    words = ins.serialize()
    assert len(words) == I.WORDS and words[I.W_OPCODE] == ins.opcode()
    assert all(w == 0 for w in words[I.W_A0 + len(ins.ARGS):])
    assert I.deserialize(words) == ins


def test_bad_encodings_raise_with_the_value():
    with pytest.raises(I.EncodingError, match="2147483648"):
        I.OProj(0, 0, 1, 0, 1, row0=2**31, rows=16).serialize()
    with pytest.raises(I.EncodingError, match="signal"):
        I.Embed(0, -1, 0, 0, -1).serialize()
    with pytest.raises(I.EncodingError, match="unknown opcode 99; valid opcodes: 1 \\(Embed\\)"):
        I.deserialize([99] + [0] * (I.WORDS - 1))
    with pytest.raises(I.EncodingError, match="16 words"):
        I.deserialize([1, 2, 3])


def test_params_header_and_packing():
    text = params_header()
    assert f"sizeof(Params) == {PARAM_BYTES}" in text
    names = re.findall(r"^  [\w\s\*]+?[\s\*](\w+);$", text, re.M)
    assert names == [n for n, _ in PARAM_FIELDS]
    values = {name: (1.5 if ctype == "double" else 8 * i) for i, (name, ctype) in enumerate(PARAM_FIELDS)}
    blob = pack_params(values)
    assert len(blob) == PARAM_BYTES
    idx = [n for n, _ in PARAM_FIELDS].index("hidden")
    assert int.from_bytes(blob[8 * idx: 8 * idx + 8], "little") == 8 * idx
    with pytest.raises(KeyError, match="missing \\['eps'\\]"):
        pack_params({k: v for k, v in values.items() if k != "eps"})
    with pytest.raises(ValueError, match="instructions must be a device address"):
        pack_params(values | {"instructions": -4})
