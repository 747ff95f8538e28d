#!/usr/bin/env python3
"""Render every chat template in ../shared/templates with a fixed set of
conversations using Debian's python3-jinja2, set up the way Hugging Face's
apply_chat_template sets it up, and store the results as test data for
engine/tests/test_template.c.

Setup (transformers' _compile_jinja_template): ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, the loopcontrols extension, a tojson filter that
does not escape non-ASCII, globals raise_exception(msg) and
strftime_now(fmt).  strftime_now uses a fixed date (FIXED_NOW) so the
stored outputs are reproducible; the C test passes the same instant.

Output layout (under --out, default engine/tests/data/templates):
  *.jinja                   copies of the templates
  convs/NAME.json           the template variables of each conversation
  expected/TMPL__CONV.out   the rendered prompt, byte for byte
  expected/TMPL__CONV.err   "KIND<TAB>message" when jinja2 raised;
                            KIND is raise_exception for the template's own
                            raise_exception(), else the exception class

Usage: render_templates.py [--templates DIR] [--out DIR]
"""

import argparse
import datetime
import json
import os
import shutil
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# 2026-01-15 10:30:00 UTC; the C side gets the same epoch second.
FIXED_NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)
FIXED_EPOCH = 1768473000


class RaisedByTemplate(Exception):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string",
                             "description": "City name, e.g. Paris"},
                    "unit": {"type": "string",
                             "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
]

SYSTEM = "You are a helpful assistant."


def base(messages, agp, **extra):
    v = {
        "messages": messages,
        "add_generation_prompt": agp,
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    v.update(extra)
    return v


def conversations():
    single = [{"role": "user", "content": "Hello, how are you?"}]
    multi = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 equals 4."},
        {"role": "user", "content": "And times 3?"},
    ]
    system = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Write a haiku about the sea."},
    ]
    six = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{
             "id": "call_1",
             "type": "function",
             "function": {"name": "get_weather",
                          "arguments": {"city": "Paris", "unit": "celsius"}},
         }]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"},
        {"role": "assistant",
         "content": "It is 18 degrees and sunny in Paris."},
        {"role": "user", "content": "Thanks! And in London?"},
    ]
    unicode = [
        {"role": "system", "content": "Réponds en français, s'il te plaît."},
        {"role": "user",
         "content": "你好，世界！ Ünïcödé \"quotes\" \\ back\\slash\n"
                    "emoji: 😀🎉 tab:\t end"},
        {"role": "assistant", "content": "Bonjour ! 👋 Ça va ?"},
        {"role": "user", "content": "日本語も話せますか？"},
    ]
    parts = [
        {"role": "system",
         "content": [{"type": "text", "text": SYSTEM}]},
        {"role": "user",
         "content": [{"type": "text", "text": "Describe this: "},
                     {"type": "text", "text": "a red apple."}]},
    ]
    return {
        "single": base(single, True),
        "single_nogen": base(single, False),
        "multi": base(multi, True),
        "system": base(system, True),
        "tools": base(six, True, tools=TOOLS),
        "tools_nogen": base(six, False, tools=TOOLS),
        "unicode": base(unicode, True),
        "parts": base(parts, True),
    }


def render(env, src, variables):
    try:
        tmpl = env.from_string(src)
        return "out", tmpl.render(**variables)
    except RaisedByTemplate as e:
        return "err", "raise_exception\t%s" % e
    except Exception as e:   # noqa: BLE001 - every failure is data here
        return "err", "%s\t%s" % (type(e).__name__, e)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.normpath(os.path.join(here, "..", ".."))
    shared = os.environ.get("LLM_SHARED",
                            os.path.join(repo, "..", "shared"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--templates", default=os.path.join(shared, "templates"))
    ap.add_argument("--out", default=os.path.join(
        repo, "engine", "tests", "data", "templates"))
    args = ap.parse_args()

    env = make_env()
    convs = conversations()
    os.makedirs(os.path.join(args.out, "convs"), exist_ok=True)
    exp = os.path.join(args.out, "expected")
    if os.path.isdir(exp):
        shutil.rmtree(exp)
    os.makedirs(exp)
    for name, v in convs.items():
        with open(os.path.join(args.out, "convs", name + ".json"), "w",
                  encoding="utf-8") as f:
            json.dump(v, f, ensure_ascii=False, indent=1)
            f.write("\n")

    names = sorted(n for n in os.listdir(args.templates)
                   if n.endswith(".jinja"))
    rendered = {c: 0 for c in convs}
    for n in names:
        shutil.copyfile(os.path.join(args.templates, n),
                        os.path.join(args.out, n))
        with open(os.path.join(args.templates, n), encoding="utf-8") as f:
            src = f.read()
        stem = n[:-len(".jinja")]
        for c, v in convs.items():
            kind, text = render(env, src, v)
            if kind == "out":
                rendered[c] += 1
            with open(os.path.join(exp, "%s__%s.%s" % (stem, c, kind)), "w",
                      encoding="utf-8", newline="") as f:
                f.write(text)
    for c in convs:
        print("%-14s %2d of %d rendered" % (c, rendered[c], len(names)))
    print("jinja2 %s, fixed now %s (epoch %d)" % (
        jinja2.__version__, FIXED_NOW.isoformat(), FIXED_EPOCH))
    return 0


if __name__ == "__main__":
    sys.exit(main())
