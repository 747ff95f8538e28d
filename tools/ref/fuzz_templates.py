#!/usr/bin/env python3
"""Differential fuzzing of the C Jinja renderer against jinja2.

Generates random templates from a small grammar covering the constructs
chat templates use, renders each with jinja2 set up as in
render_templates.py, and writes them in snippets.json's format
([{name, template, vars, out | err}]) for `test_template --cases FILE`.

Usage: fuzz_templates.py [-n COUNT] [--seed N] [-o FILE]
"""

import argparse
import copy
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_templates as R  # noqa: E402

ATOMS = [
    "1", "0", "-3", "2.5", "'s'", "\"é😀\"", "none", "true", "x", "l", "d",
    "nope", "messages", "messages[0]", "l[1:]", "d.k", "d['k']", "[]",
    "{}", "[1, 'a', none]", "{'k': [1, 2]}", "(1, 2)", "range(3)",
    "ns.v", "'a,b'.split(',')", "l[-1]", "messages|length",
    "x ~ 'y'", "' pad '", "'A b'", "d.n", "messages[0].role", "l[0]",
    "'%s'", "[3, 1, 2]", "{'b': 1, 'a': 2}", "3.0", "'12'",
]
LOOP_ATOMS = ["loop.index", "loop.first", "loop.last", "loop.length",
              "loop.revindex", "loop.index0", "x"]
BINOPS = [" + ", " - ", " * ", " / ", " // ", " % ", " ** ", " ~ ", " == ",
          " != ", " < ", " >= ", " in ", " not in ", " and ", " or "]
FILTERS = [
    "length", "string", "trim", "tojson", "tojson(indent=2)", "upper",
    "first", "last", "list", "items|list", "dictsort", "join(',')",
    "unique|list", "sort", "reverse|list", "int", "float", "abs",
    "default('z')", "safe", "selectattr('role')|list",
    "map(attribute='role')|list", "indent(2)", "title", "capitalize",
    "replace('a', 'b')", "min", "max", "sum", "round", "select('odd')|list",
    "reject('none')|list", "wordcount", "center(9)", "e", "lower",
    "default('z', true)", "trim('s')", "join", "tojson(sort_keys=true)",
]
TESTS = ["defined", "none", "string", "mapping", "iterable", "sequence",
         "number", "odd", "even", "true", "divisibleby(2)", "eq 1",
         "in [1]", "lower", "boolean", "integer", "float", "undefined"]


def expr(rng, depth, in_loop):
    k = 0 if depth > 3 else rng.randrange(7)
    if k <= 1:
        pool = ATOMS + (LOOP_ATOMS if in_loop else [])
        return rng.choice(pool)
    if k == 2:
        return expr(rng, depth + 1, in_loop) + rng.choice(BINOPS) + \
            expr(rng, depth + 1, in_loop)
    if k == 3:
        return "(" + expr(rng, depth + 1, in_loop) + ")|" + rng.choice(FILTERS)
    if k == 4:
        return "(" + expr(rng, depth + 1, in_loop) + ")" + \
            rng.choice([" is ", " is not "]) + rng.choice(TESTS)
    if k == 5:
        return "(" + expr(rng, depth + 1, in_loop) + " if " + \
            expr(rng, depth + 1, in_loop) + " else " + \
            expr(rng, depth + 1, in_loop) + ")"
    return rng.choice(["not ", "-"]) + "(" + expr(rng, depth + 1, in_loop) + ")"


def body(rng, depth, in_loop):
    out = []
    for _ in range(1 + rng.randrange(3)):
        k = 0 if depth > 3 else rng.randrange(10)
        if k == 0:
            out.append(rng.choice(["t\n ", "  x  \n", "\n"]))
        elif k == 1:
            ws = rng.choice([("{{ ", " }}"), ("{{- ", " -}}"), ("{{ ", " -}}")])
            out.append(ws[0] + expr(rng, 0, in_loop) + ws[1])
        elif k == 2:
            out.append("{% for x in " + expr(rng, 1, in_loop) +
                       rng.choice([" %}", " %}", " if x %}"]) + "\n")
            out.append(body(rng, depth + 1, True))
            if rng.randrange(3) == 0:
                out.append("{% else %}" + body(rng, depth + 1, in_loop))
            out.append("{% endfor %}\n")
        elif k == 3:
            out.append("  {%- if " + expr(rng, 1, in_loop) + " %}\n")
            out.append(body(rng, depth + 1, in_loop))
            if rng.randrange(2):
                out.append("{% elif " + expr(rng, 1, in_loop) + " -%}")
                out.append(body(rng, depth + 1, in_loop))
            out.append("{% else %}" + body(rng, depth + 1, in_loop) +
                       "{% endif %}")
        elif k == 4:
            out.append(rng.choice(["{% set y = ", "{% set ns.v = "]) +
                       expr(rng, 1, in_loop) + " %}{{ y }}")
        elif k == 5:
            out.append("{% macro m(a, b=2) %}[{{ a }}{{ b }}]" +
                       body(rng, depth + 1, False) + "{% endmacro %}" +
                       "{{ m(" + expr(rng, 2, in_loop) + ") }}")
        elif k == 6:
            out.append("{% set y %}" + body(rng, depth + 1, in_loop) +
                       "{% endset %}{{ y|trim }}")
        elif k == 7 and in_loop:
            out.append(rng.choice(["{% break %}", "{% continue %}"]))
        elif k == 8:
            out.append("{# c #}\n    {% if true %}  {{ ns.v }}\n{% endif %}")
        else:
            out.append("{% filter upper %}" + body(rng, depth + 1, in_loop) +
                       "{% endfilter %}")
    return "".join(out)


VARS = {"x": 3, "l": [1, 2, "z"], "d": {"k": "v", "n": None},
        "messages": [{"role": "user", "content": "hi"}]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", default="-")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    env = R.make_env()
    cases = []
    for i in range(args.n):
        src = "{% set ns = namespace(v=0) %}" + body(rng, 0, False)
        # a fresh copy each time: jinja2 can change what it was given
        kind, text = R.render(env, src, copy.deepcopy(VARS))
        item = {"name": "random%d" % i, "template": src, "vars": VARS}
        item["out" if kind == "out" else "err"] = text
        cases.append(item)
    f = sys.stdout if args.o == "-" else open(args.o, "w", encoding="utf-8")
    json.dump(cases, f, ensure_ascii=False, indent=1)
    f.write("\n")
    if f is not sys.stdout:
        f.close()
    ok = sum(1 for c in cases if "out" in c)
    print("%d cases, %d rendered by jinja2" % (len(cases), ok),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
