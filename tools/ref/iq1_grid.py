#!/usr/bin/env python3
"""Write engine/src/kernels/iq1_grids.c from llama.cpp's ggml-common.h.

The IQ1_S / IQ1_M grid (iq1s_grid, 2048 points of {-1, 0, 1}^8) is data
of the formats' definition.  ggml-common.h holds it as uint64 words whose
byte j is element j (0xff, 0x00, 0x01).  This script reads those words,
checks them (2048 of them, every byte -1, 0 or 1, all distinct, in
ascending order) and writes them in the engine's own compact form: 16
bits a point, element j in bits 2j..2j+1 as value + 1, which a macro
expands at compile time to the int8 layout the kernels index.  The
comment it writes carries the FNV-1a 64 of the expanded table (2048
words, little-endian), which test_quant_iq1 recomputes.

usage: iq1_grid.py path/to/ggml-common.h > engine/src/kernels/iq1_grids.c
"""

import re
import sys


def words(text):
    body = text.split("iq1s_grid, NGRID_IQ1S)", 1)[1]
    body = body.split("GGML_TABLE_END()", 1)[0]
    return [int(w, 16) for w in re.findall(r"0x[0-9a-fA-F]{16}", body)]


def elements(w):
    return [((w >> 8 * j) & 0xff) - (256 if (w >> 8 * j) & 0x80 else 0)
            for j in range(8)]


def fnv1a64(ws):
    h = 0xcbf29ce484222325
    for w in ws:
        for j in range(8):
            h ^= (w >> 8 * j) & 0xff
            h = (h * 0x100000001b3) & 0xffffffffffffffff
    return h


def main():
    ws = words(open(sys.argv[1]).read())
    els = [elements(w) for w in ws]
    assert len(ws) == 2048, len(ws)
    assert all(v in (-1, 0, 1) for e in els for v in e)
    assert len(set(ws)) == 2048
    keys = [tuple(reversed(e)) for e in els]
    assert all(keys[i] < keys[i + 1] for i in range(2047))
    codes = [sum((v + 1) << 2 * j for j, v in enumerate(e)) for e in els]

    out = sys.stdout
    out.write("""/*
 * The IQ1_S / IQ1_M grid: 2048 points of {-1, 0, 1}^8 that a block's
 * 11-bit indices select (data of the formats' definition: iq1s_grid in
 * llama.cpp's ggml/src/ggml-common.h, 64-bit words whose byte j is
 * element j).  Written by tools/ref/iq1_grid.py from that file: here a
 * point is 16 bits, element j in bits 2j..2j+1 as value + 1, and
 * LLM_IQ1_P expands it at compile time to the int8 words the kernels
 * index (llm_iq1_grid[i] as int8_t[8], little-endian).
 *
 * FNV-1a 64 of llm_iq1_grid's 16384 bytes: 0x%016x
 * (test_quant_iq1 recomputes it; the points are distinct and ascending).
 */

#include <stdint.h>

#include "kernels_common.h"

/* Byte j of a point: value v - 1 of the 2-bit code v as an int8 byte. */
#define LLM_IQ1_B(c, j)  ((uint64_t) ((((c) >> 2 * (j)) & 3) + 0xff) & 0xff) \\
                         << 8 * (j)
#define LLM_IQ1_P(c)     (LLM_IQ1_B(c, 0) | LLM_IQ1_B(c, 1) | LLM_IQ1_B(c, 2) \\
                          | LLM_IQ1_B(c, 3) | LLM_IQ1_B(c, 4)                 \\
                          | LLM_IQ1_B(c, 5) | LLM_IQ1_B(c, 6)                 \\
                          | LLM_IQ1_B(c, 7))

#define P  LLM_IQ1_P

const uint64_t  llm_iq1_grid[2048] __attribute__((aligned(64))) = {
""" % fnv1a64(ws))
    for i in range(0, 2048, 6):
        row = ", ".join("P(0x%04x)" % c for c in codes[i:i + 6])
        out.write("    %s,\n" % row)
    out.write("};\n\n#undef P\n")


if __name__ == "__main__":
    main()
