#!/usr/bin/env python3
"""Writes the seed corpus fuzz/corpus/npy/: a few valid .npy images and one of each malformed kind.

The files have no .npy extension (the repository ignores *.npy). Rerun after changing this list:
    python3 fuzz/make_corpus.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "npy")


def image(header, data=b"", version=1, pad=True):
    text = header.encode()
    width = 2 if version == 1 else 4
    if pad:
        total = (10 + (width - 2) + len(text) + 1 + 63) // 64 * 64
        text += b" " * (total - (8 + width) - len(text) - 1) + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + data


F4_2x3 = struct.pack("<6f", 0, 1, -2, 3.5, 6, -0.5)
SEEDS = {
    "valid_v1_f4_2x3": image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", F4_2x3),
    "valid_v2_u1_4": image("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }",
                           bytes([1, 2, 3, 255]), version=2),
    "valid_v3_f2_scalar": image("{'descr': '<f2', 'fortran_order': False, 'shape': (), }",
                                b"\x00\x3c", version=3),
    "valid_i1_empty": image("{'descr': '|i1', 'fortran_order': False, 'shape': (0, 5), }"),
    "valid_reordered_keys": image('{"shape": (1, 1, 2), "fortran_order": False, "descr": "<u1"}',
                                  b"\x07\x08", pad=False),
    "valid_rank8": image("{'descr': '|u1', 'fortran_order': False, 'shape': "
                         "(1, 1, 1, 1, 1, 1, 1, 2), }", b"ab"),
    "bad_magic": b"\x93NUMPZ\x01\x00" + image("{}")[8:],
    "bad_version": image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
                         b"\0\0\0\0", version=4),
    "truncated_header": image("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }")[:40],
    "truncated_data": image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                            F4_2x3[:10]),
    "trailing_data": image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                           F4_2x3 + b"\0"),
    "fortran_order": image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", F4_2x3),
    "big_endian": image("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", F4_2x3),
    "bad_descr": image("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", F4_2x3),
    "negative_shape": image("{'descr': '|u1', 'fortran_order': False, 'shape': (-1, 2), }"),
    "overflow_shape": image("{'descr': '<f4', 'fortran_order': False, "
                            "'shape': (4611686018427387904, 4), }"),
    "missing_key": image("{'descr': '<f4', 'shape': (1,), }", b"\0\0\0\0"),
    "not_a_tuple": image("{'descr': '|u1', 'fortran_order': False, 'shape': (3), }", b"abc"),
}

os.makedirs(OUT, exist_ok=True)
for name, content in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(content)
print(f"wrote {len(SEEDS)} files to {OUT}")
