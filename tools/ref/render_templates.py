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
  snippets.json             small templates pinning down jinja2 semantics:
                            [{name, template, vars, out | err}]

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
    reasoning = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4",
         "reasoning_content": "The user asks a sum. 2+2 is 4."},
        {"role": "user", "content": "Sure?"},
    ]
    parallel = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None,
         "tool_calls": [
             {"id": "abc123XYZ", "type": "function",
              "function": {"name": "get_weather",
                           "arguments": {"city": "Paris"}}},
             {"id": "def456UVW", "type": "function",
              "function": {"name": "get_weather",
                           "arguments": {"city": "Rome", "unit": "celsius"}}},
         ]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": "18C"},
        {"role": "tool", "tool_call_id": "def456UVW", "content": "25C"},
        {"role": "assistant", "content": "Paris 18C, Rome 25C."},
    ]
    strargs = [dict(m) for m in six]
    strargs[2] = dict(six[2])
    strargs[2]["tool_calls"] = [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather",
                     "arguments": "{\"city\": \"Paris\"}"}}]
    prefill = [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi"},
    ]
    tools_nosys = [m for m in six if m["role"] != "system"]
    return {
        "builtin": base(six, True, tools=TOOLS,
                        builtin_tools=["brave_search", "wolfram_alpha"],
                        tools_in_user_message=False,
                        date_string="26 Jul 2024"),
        "tools_nosys": base(tools_nosys, True, tools=TOOLS),
        "thinking": base(reasoning, True, enable_thinking=True),
        "prefill": base(prefill, False),
        "reasoning": base(reasoning, True, enable_thinking=False),
        "parallel": base(parallel, True, tools=TOOLS),
        "strargs": base(strargs, False, tools=TOOLS),
        "single": base(single, True),
        "single_nogen": base(single, False),
        "multi": base(multi, True),
        "system": base(system, True),
        "tools": base(six, True, tools=TOOLS),
        "tools_nogen": base(six, False, tools=TOOLS),
        "unicode": base(unicode, True),
        "parts": base(parts, True),
    }


# Small templates that pin down jinja2's exact behaviour beyond what the
# real templates exercise: how values print, filters, tests, methods,
# scoping, whitespace control.  (name, template, variables)
SNIPPETS = [
    ("print_consts", "{{ none }}|{{ true }}|{{ false }}|{{ None }}|{{ True }}", {}),
    ("print_floats", "{{ 1.0 }} {{ 0.1 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} "
     "{{ 0.0001 }} {{ 123456789.123 }} {{ -0.0 }} {{ 3/2 }} {{ 10/3 }} "
     "{{ 2**0.5 }} {{ 4/2 }} {{ 1.5e300*1e10 }} {{ 7//2 }} {{ -7//2 }} "
     "{{ -7%3 }} {{ 7.5//2 }} {{ 2**10 }} {{ 5%-3 }}", {}),
    ("print_json_floats", "{{ x }} {{ x|tojson }}", {"x": [1.5, 2.0, 1e-7, 3]}),
    ("print_list", "{{ x }}", {"x": ["a", "it's", 'say "hi"', "both ' \"",
                                     "nl\n\ttab\\", 1, 2.5, None, True,
                                     {"k": [1, {"z": None}]}, "é😀", ""]}),
    ("print_tuple", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ 1, 'a' }}", {}),
    ("print_dict", "{{ d }} {{ d.items() }} {{ d.keys() }} {{ d.values() }}",
     {"d": {"b": 1, "a": [True, None], "c": {"x": "y"}}}),
    ("print_range", "{{ range(3) }} {{ range(1, 10, 3)|list }} "
     "{{ range(5, 0, -2)|list }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ undefined_var ~ 2.0 }}", {}),
    ("string_filter", "{{ x|string }}|{{ none|string }}|{{ 1.0|string }}|"
     "{{ d|string }}", {"x": [1, "a"], "d": {"k": "v"}}),
    ("trim", "[{{ '  a b \\n\\t'|trim }}][{{ 'xxaxx'|trim('x') }}]"
     "[{{ '\u3000\u00a0wide\u2003'|trim }}][{{ none|trim }}]", {}),
    ("join", "{{ [1, 'a', none]|join }}|{{ x|join(', ') }}|"
     "{{ users|join('-', attribute='name') }}|{{ 'abc'|join('.') }}",
     {"x": ["p", "q"], "users": [{"name": "ann"}, {"name": "bob"}]}),
    ("items", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}"
     "{{ d|items|list }}", {"d": {"z": 1, "a": 2}}),
    ("dictsort", "{{ d|dictsort }}{{ d|dictsort(true) }}"
     "{{ d|dictsort(by='value') }}{{ d|dictsort(reverse=true) }}",
     {"d": {"b": 3, "A": 1, "a": 2, "C": 0}}),
    ("selectattr", "{{ m|selectattr('role', 'equalto', 'user')|list }}"
     "{{ m|rejectattr('role', 'eq', 'user')|map(attribute='role')|list }}"
     "{{ m|selectattr('tool')|list|length }}"
     "{{ m|selectattr('tool', 'defined')|list|length }}"
     "{{ m|map(attribute='x', default='-')|join }}"
     "{{ m|map(attribute='role')|map('upper')|join(',') }}"
     "{{ [1, 0, 2, none]|select|list }}{{ [1, 2, 3, 4]|select('odd')|list }}"
     "{{ [1, 2, 3, 4]|reject('even')|list }}"
     "{{ [3, 5, 8]|select('gt', 4)|list }}{{ ['a', 'B']|select('lower')|list }}",
     {"m": [{"role": "user", "x": 1}, {"role": "assistant", "tool": 0},
            {"role": "user"}]}),
    ("first_last", "{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}"
     "{{ 'héllo'|first }}{{ 'héllo'|last }}[{{ []|first }}]{{ {'a': 1}|first }}",
     {}),
    ("length", "{{ 'héllo😀'|length }} {{ [1, 2]|length }} {{ {'a': 1}|length }}"
     " {{ nope|length }} {{ 'abc'|count }}", {}),
    ("default", "{{ nope|default('d') }}|{{ ''|default('d') }}|"
     "{{ ''|default('d', true) }}|{{ none|default('d') }}|{{ 0|d('z', true) }}"
     "|{{ nope|default }}|{{ x|default(1) }}", {"x": False}),
    ("replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}"
     " {{ 'abc'|replace('', '-') }} {{ 'héllo'|replace('é', 'e') }}"
     " {{ 123|replace('2', 'x') }}", {}),
    ("capitalize_title", "{{ 'hELLO wORLD'|capitalize }}|"
     "{{ \"hello world-foo (bar) o'neil x_y\"|title }}|"
     "{{ \"hello world-foo o'neil x_y\".title() }}|{{ 'éCOLE'|capitalize }}|"
     "{{ 'ÉCOLE straße'|lower }}|{{ 'école'|upper }}", {}),
    ("tojson", "{{ x|tojson }}\n{{ x|tojson(indent=2) }}\n"
     "{{ x|tojson(indent=0) }}\n{{ x|tojson(separators=(',', ':')) }}\n"
     "{{ x|tojson(sort_keys=true) }}\n{{ 'a\"b\\\\c\\n\\u0001é😀\\u007f'|tojson }}\n"
     "{{ [[], {}, [[]]]|tojson(indent=2) }}\n{{ x|tojson(indent='\\t') }}\n"
     "{{ none|tojson }}{{ true|tojson }}{{ 1.0|tojson }}{{ (1, 2)|tojson }}\n"
     "{{ 'é😀'|tojson(ensure_ascii=true) }}{{ x|tojson(true, 1) }}",
     {"x": {"b": [1, 2.5, None, True, "s"], "a": {"k": "ü"}, "1": []}}),
    ("indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}]"
     "[{{ 'a\\n\\nb\\n'|indent(2, blank=true) }}][{{ 'x\\n'|indent('> ') }}]"
     "[{{ ''|indent(first=true) }}]", {}),
    ("list_filters", "{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}"
     "{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}"
     "{{ [3, 1, 2]|sort(reverse=true) }}"
     "{{ u|sort(attribute='n')|map(attribute='n')|list }}"
     "{{ ['a', 'A', 'b', 'a']|unique|list }}{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}"
     "{{ ['b', 'A']|min }}{{ [1, 2.5]|sum }}{{ u|sum(attribute='n') }}"
     "{{ [1, 2]|reverse|list }}{{ 'abc'|reverse }}{{ 'ab'|list }}"
     "{{ {'k': 1}|list }}",
     {"u": [{"n": 2}, {"n": 1}, {"n": 3}]}),
    ("number_filters", "{{ '42'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }}"
     " {{ '3.5'|float }} {{ 2|float }} {{ -3|abs }} {{ 2.567|round(2) }}"
     " {{ 2.5|round }} {{ 2.1|round(method='ceil') }} {{ true|int }}"
     " {{ ' 12 '|int }} {{ '1e3'|float }}", {}),
    ("misc_filters", "{{ 'a b  c'|wordcount }}[{{ 'ab'|center(6) }}]"
     "{{ '<&>'|e }}{{ '<a>'|safe }}{{ x|attr('k') }}", {"x": {"k": 5}}),
    ("str_methods", "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}"
     "{{ 'a b c'.split(' ', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}"
     "{{ 'xxhixx'.strip('x') }}{{ '  hi  '.lstrip() }}|{{ '  hi  '.rstrip() }}|"
     "{{ 'hello'.startswith('he') }}{{ 'hello'.startswith(('x', 'h')) }}"
     "{{ 'hello'.endswith('lo') }}{{ 'hello'.replace('l', 'L', 1) }}"
     "{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}"
     "{{ 'hello'.count('l') }}{{ 'hello world'.title() }}"
     "{{ 'hELLO'.capitalize() }}{{ 'a\\nb\\r\\nc'.splitlines() }}"
     "{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}"
     "{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'abc'.islower() }}"
     "{{ ' '.isspace() }}{{ 'héllo'.find('l') }}", {}),
    ("slicing", "{{ 'hello'[1:] }} {{ 'hello'[::-1] }} {{ 'hello'[-2:] }}"
     " {{ 'héllo😀'[1:3] }} {{ 'héllo😀'[-1] }} {{ [1, 2, 3, 4][::2] }}"
     " {{ [1, 2, 3][:-1] }} {{ [1, 2, 3][5:] }} {{ 'abc'[0] }} {{ x[1:][0] }}"
     " {{ [1, 2, 3][-1] }} {{ 'abcdef'[4:1:-1] }}", {"x": [1, 2, 3]}),
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}"
     "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}"
     "{{ loop.length }}{{ loop.cycle('o', 'e') }}"
     "{% if not loop.first %}{{ loop.previtem }}{% endif %}"
     "{% if not loop.last %}{{ loop.nextitem }}{% endif %};{% endfor %}", {}),
    ("loop_else_filter", "{% for x in [] %}x{% else %}empty{% endfor %}"
     "{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}"
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
     "{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"
     "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"
     "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}"
     "{% for x in nope %}never{% endfor %}", {}),
    ("scoping", "{% set a = 1 %}{% for i in [1, 2] %}{{ a }}{% set a = a + 10 %}"
     "{{ a }}{% endfor %}{{ a }}{% if true %}{% set a = 5 %}{% endif %}{{ a }}"
     "{% set ns = namespace(n=0, l=[]) %}{% for i in range(3) %}"
     "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"
     "{% macro m() %}{{ a }}{% endmacro %}{% set a = 7 %}{{ m() }}", {}),
    ("set_block", "{% set x %}  Hello {{ 'w' }}  {% endset %}[{{ x }}]"
     "{% set y | trim | upper %}  b  {% endset %}[{{ y }}]"
     "{% filter upper %}up {{ 'x' }}{% endfilter %}"
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("macros", "{% macro m(a, b=2, c='c') %}{{ a }}{{ b }}{{ c }}{% endmacro %}"
     "{{ m(1) }} {{ m(1, 3) }} {{ m(1, c='z') }} {{ m(a=5) }} {{ m() }}|"
     "{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}"
     "{% macro wrap(t) %}<{{ caller() }}:{{ t }}>{% endmacro %}"
     "{% call wrap('x') %}inner{% endcall %}"
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}"
     "{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("arith", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}"
     " {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] + [2] }} {{ [0] * 3 }} {{ 1 + 1.5 }}"
     " {{ true + 1 }} {{ 10 % 4 }} {{ 1 - -1 }} {{ 'a' + 'b' }} {{ +3 }}", {}),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }}"
     " {{ [1, 2] == [1, 2] }} {{ 'a' in 'cat' }} {{ 1 in [1, 2] }}"
     " {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ none == none }}"
     " {{ 1 != 2 }} {{ [1, 2] < [1, 3] }} {{ 'é' > 'z' }} {{ true == 1 }}"
     " {{ nope == nope2 }} {{ 'x' in nope }}", {}),
    ("tests", "{{ x is defined }}{{ nope is defined }}{{ nope is undefined }}"
     "{{ none is none }}{{ 's' is string }}{{ d is mapping }}{{ l is mapping }}"
     "{{ l is iterable }}{{ 's' is iterable }}{{ 1 is iterable }}"
     "{{ l is sequence }}{{ d is sequence }}{{ 1 is number }}{{ 1.5 is number }}"
     "{{ 1 is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}"
     "{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}"
     "{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}"
     "{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 'ab' is lower }}{{ 'AB' is upper }}"
     "{{ none is sameas none }}{{ 1 is in [1] }}{{ 2 is gt 1 }}"
     "{{ x is not none }}{{ d.missing is defined }}{{ l is not string }}"
     "{{ d.items is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}",
     {"x": 1, "d": {"a": 1}, "l": [1]}),
    ("logic", "[{{ '' or 'x' }}][{{ 0 and 1 }}][{{ 'a' and 'b' }}][{{ not '' }}]"
     "[{{ 'y' if false }}][{{ 'y' if true }}][{{ 1 if 0 else 2 if 0 else 3 }}]"
     "[{{ none or [] }}][{{ not 1 == 2 }}]", {}),
    ("whitespace", "A\n  {% if true %}\n  x\n  {% endif %}\nB\n"
     "{%- if true -%}  C  {%- endif -%}\n D {{- ' E ' -}} F\n"
     "{# comment #}\n  {# indented comment #}\nG {%+ if true %}H{% endif %}\n"
     "{%- raw %}{{ raw }}{% endraw %}\n  {%- raw -%}  R  {%- endraw %}\n"
     "tail {{ 'v' }}\n{% if true %}kept{% endif %}\n\nend\n", {}),
    ("whitespace2", "{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\n"
     "{%- for i in [1, 2] %}\n  - {{ i }}\n{%- endfor %}\n"
     "x  {% if true %}y{% endif %}  z\n\t{%- if true %}t{% endif %}\r\nw\r\n", {}),
    ("whitespace3", "a {{ '}}' }} b {{ {'k': {'j': 1}} }} {{ '%}' }}\n"
     "  {#- c -#}  x\n\t {#+ c #} y\n  {% if true +%}  z{% endif %}\n"
     "{ not a tag } {x} {%raw%} {{ }} {%endraw%}|\n"
     "\t\t{%- if true %}\n\tq\n\t{%- endif %}\n  {{- 'v' }}\n"
     "{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}\n{# last #}\n", {}),
    ("whitespace4", "\n\n  {% set x = 1 %}\n  {{ x }}\n    {% macro m() %}\n"
     "  body\n  {% endmacro %}\n[{{ m() }}]\n  {%+ if true %}p{% endif %}"
     "\n  {% if true %}\n  {%- endif %}end", {}),
    ("with", "{% set a = 9 %}{% with a = 1, b = a %}{{ a }}{{ b }}"
     "{% set c = 3 %}{% endwith %}{{ a }}[{{ c }}]", {}),
    ("strings", "{{ 'a\\nb' }}|{{ \"it's\" }}|{{ 'it\\'s' }}|{{ '\\u00e9\\x41\\t|' }}"
     "{{ 'a' 'b' }}|{{ '\\\\' }}|{{ '\\q' }}", {}),
    ("dicts", "{% set d = {'a': 1, 'b': {'c': [1, 2]}} %}{{ d.a }}{{ d['b'].c[1] }}"
     "{{ d.get('z', 'dflt') }}{{ d.get('z') }}{{ d.get('a') }}"
     "{% for k, v in d.items() %}{{ k }}{% endfor %}{{ d.keys()|list }}"
     "{{ dict(x=1, y='2') }}{{ {1: 'one', 'k': none} }}{{ d.b.c.0 }}"
     "{% set x = {} %}{{ x }}{{ d|length }}", {}),
    ("undefined_ok", "[{{ nope }}][{{ none.attr }}][{{ d.missing }}]"
     "[{{ l[10] }}][{{ d.missing is defined }}][{{ nope|default('d') }}]"
     "[{{ 's'.nomethod }}][{{ (1).real }}]{% if nope %}no{% else %}falsy{% endif %}",
     {"d": {}, "l": []}),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %d %b %y') }}", {}),
    ("err_undefined_attr", "{{ nope.attr }}", {}),
    ("err_undefined_add", "{{ nope + 1 }}", {}),
    ("err_missing_attr_chain", "{{ d.a.b }}", {"d": {}}),
    ("err_raise", "{{ raise_exception('custom: ' ~ x) }}", {"x": 42}),
    ("err_type_add", "{{ 'a' + 1 }}", {}),
    ("err_type_iter", "{% for x in 5 %}{% endfor %}", {}),
    ("err_unsafe_append", "{% set l = [] %}{% set _ = l.append(1) %}", {}),
    ("err_unsafe_pop", "{% set d = {'a': 1} %}{{ d.pop('a') }}", {}),
    ("err_syntax", "{% if %}", {}),
    ("err_unclosed", "{% for x in y %}", {}),
    ("err_unknown_tag", "{% frobnicate %}", {}),
    ("err_unknown_filter", "{{ x|frobnicate }}", {}),
    ("err_macro_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_tojson_undefined", "{{ nope|tojson }}", {}),
    ("err_length_gen", "{{ [1]|select|length }}", {}),
    ("err_items_nonmap", "{{ [1]|items|list }}", {}),
    ("err_ns_assign", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("err_compare", "{{ 1 < 'a' }}", {}),
    ("err_range", "{{ range(1000000)|length }}", {}),
]


def render_snippets(env):
    out = []
    for name, src, variables in SNIPPETS:
        kind, text = render(env, src, variables)
        item = {"name": name, "template": src, "vars": variables}
        item["out" if kind == "out" else "err"] = text
        out.append(item)
    return out


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
    snippets = render_snippets(env)
    with open(os.path.join(args.out, "snippets.json"), "w",
              encoding="utf-8") as f:
        json.dump(snippets, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for c in convs:
        print("%-14s %2d of %d rendered" % (c, rendered[c], len(names)))
    print("snippets       %2d of %d rendered" % (
        sum(1 for x in snippets if "out" in x), len(snippets)))
    print("jinja2 %s, fixed now %s (epoch %d)" % (
        jinja2.__version__, FIXED_NOW.isoformat(), FIXED_EPOCH))
    return 0


if __name__ == "__main__":
    sys.exit(main())
