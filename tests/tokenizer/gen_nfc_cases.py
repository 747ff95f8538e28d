#!/usr/bin/env python3
"""Write engine/tests/data/vocab/nfc-cases.txt: random strings rich in what
NFC changes (combining marks in every order, precomposed and decomposable
letters, singletons, composition exclusions, Hangul jamo and syllables) and
their NFC by Python's unicodedata (Unicode 14.0.0), one case per line:
input and expected output in hex UTF-8, separated by a space.

    python3 tests/tokenizer/gen_nfc_cases.py > engine/tests/data/vocab/nfc-cases.txt
"""
import random
import unicodedata

rnd = random.Random(20261202)
marks = [cp for cp in range(0x300, 0x370)] + [0x1AB0, 0x1DC0, 0x20D0, 0x0591,
                                             0x05B0, 0x0E38, 0x0F71, 0x302A,
                                             0x3099, 0x309A, 0x0BCD, 0x1D165]
decomposable = [cp for cp in range(0xC0, 0x250)
                if unicodedata.decomposition(chr(cp))
                and not unicodedata.decomposition(chr(cp)).startswith("<")]
decomposable += [0x212B, 0x2126, 0x212A, 0x0344, 0x0958, 0x2ADC, 0x1E9B,
                 0x1F80, 0x1FC1, 0xF900, 0xFA10, 0x2F800, 0x0340, 0x0341,
                 0x0343, 0x0374, 0x037E, 0x0387, 0x1E0A, 0x1E9B, 0x0CCB]
letters = [ord(c) for c in "aeiouAEIOUcnsyzCNSYZ αωΑΩиЙ"]
jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + \
    list(range(0x11A8, 0x11C3))
syll = [0xAC00, 0xAC01, 0xAC1C, 0xD7A3, 0xB098, 0xAE4C]
pools = [marks, marks, decomposable, letters, letters, jamo, syll,
         [ord(c) for c in "中文 x1"]]

print_cases = []
for _ in range(3000):
    s = "".join(chr(rnd.choice(rnd.choice(pools)))
                for _ in range(rnd.randint(1, 12)))
    print_cases.append(s)
for s in print_cases:
    n = unicodedata.normalize("NFC", s)
    print(s.encode().hex(), n.encode().hex())
