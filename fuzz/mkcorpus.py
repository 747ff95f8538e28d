#!/usr/bin/env python3
"""Writes the seed corpora that are not protobuf (see mkseeds.c for those):
tokenizer strings, chat templates, JSON schemas, small GGUF models and
OpenAI request bodies, under fuzz/corpus/TARGET/.  Run once; the output is
committed.

    python3 fuzz/mkcorpus.py BUILD_DIR    (BUILD_DIR/bin/llm-mkmodel)
"""

import hashlib
import json
import os
import subprocess
import sys

FUZZ = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(FUZZ)
DATA = os.path.join(REPO, "engine", "tests", "data")


def put(target, data, name=None):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    name = name or hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# fuzz_tokenizer: byte 0 = vocabulary index | flags, as in the target
VOCABS = ["gpt-2", "llama-spm", "phi-3", "deepseek-coder", "starcoder",
          "refact", "mpt"]


def tokenizer():
    for i, v in enumerate(VOCABS):
        with open(os.path.join(DATA, "vocab", v + ".inp"), encoding="utf-8") as f:
            cases = f.read().split("\n__ggml_vocab_test__\n")
        for k, s in enumerate(c for c in cases if c.strip()):
            if k >= 6:
                break
            put("tokenizer", bytes([i | (0x10 if k % 2 else 0)]) + s.encode())
    chat = "<|im_start|>user\nHi <|im_end|>\n<|im_start|>assistant\n"
    for i in (7, 8, 9):
        put("tokenizer", bytes([i | 0x10 | 0x40]) + chat.encode())
        put("tokenizer", bytes([i | 0x20]) + chat.encode())
    put("tokenizer", bytes([0x30]) + "<s>[INST] x [/INST]</s>".encode())
    put("tokenizer", bytes([1]) + "  \t\n\u00e9\u0301 \U0001f600 123456".encode())


def template():
    d = os.path.join(DATA, "templates")
    for i, name in enumerate(sorted(os.listdir(d))):
        if name.endswith(".jinja"):
            with open(os.path.join(d, name), "rb") as f:
                put("template", bytes([i % 15]) + f.read(), name[:-6])
    put("template", b"\x00{% for m in messages %}{{ m.role }}: {{ m.content "
        b"| trim }}\n{% endfor %}\x00{\"messages\":[{\"role\":\"user\","
        b"\"content\":\" hi \"}]}", "own-vars")


SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"},
     "b": {"type": "string"}}, "required": ["a"]},
    {"type": "array", "items": {"type": "number"}, "minItems": 1,
     "maxItems": 3},
    {"enum": ["red", "green", 3, None, True]},
    {"anyOf": [{"type": "string"}, {"type": "object", "properties":
     {"x": {"const": 1}}}]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type":
     "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"},
     {"type": "null"}]}}, "required": ["v"]}}, "$ref": "#/$defs/node"},
    {"type": ["string", "null"]},
    {"type": "object", "properties": {"name": {"type": "string"},
     "arguments": {"type": "object"}}, "required": ["name", "arguments"],
     "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "boolean"}},
    {"oneOf": [{"type": "integer"}, {"type": "array", "items":
     {"type": "string"}}]},
    {"type": "string", "pattern": "^a+$"},
]


def grammar():
    for i, s in enumerate(SCHEMAS):
        text = json.dumps(s).encode()
        put("grammar", bytes([i % 4]) + text)
        put("grammar", bytes([8 | (i % 4)]) + text + b"\x00{\"a\": 12, \"b\"")
    rf = {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
          "schema": SCHEMAS[0]}}
    put("grammar", bytes([4]) + json.dumps(rf).encode() + b"\x00{\"a\":1}")
    put("grammar", bytes([4]) + b'{"type":"json_object"}\x00{"k":[1,2.5e3,"\\u00e9"]}')
    put("grammar", bytes([4]) + b'{"type":"text"}')


def gguf(build):
    mk = os.path.join(build, "bin", "llm-mkmodel")
    small = ["--vocab", "300", "--embd", "16", "--layers", "1", "--heads",
             "2", "--heads-kv", "1", "--head-dim", "8", "--ff", "16",
             "--ff-exp", "16", "--ctx", "64", "-q"]
    shapes = {
        "llama-q8_0": ["--preset", "tiny-llama", "--experts", "0",
                       "--type", "Q8_0"],
        "llama-q4_0": ["--preset", "tiny-llama", "--experts", "0",
                       "--type", "Q4_0"],
        "qwen3moe-q8_0": ["--preset", "tiny", "--type", "Q8_0"],
        "qwen2-tied-f16": ["--preset", "tiny-qwen2", "--tied", "--type",
                           "F16"],
        "minimax-q8_0": ["--preset", "tiny-minimax", "--type", "Q8_0"],
        "mixtral-split-q8_0": ["--preset", "tiny-mixtral",
                               "--split-experts", "--type", "Q8_0"],
    }
    tmp = os.path.join(build, "fuzz-seed.gguf")
    for name, args in shapes.items():
        subprocess.run([mk] + args + small + ["-o", tmp], check=True,
                       stdout=subprocess.DEVNULL)
        with open(tmp, "rb") as f:
            put("gguf", f.read(), name)
    os.unlink(tmp)


def module_request():
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                         {"type": "text", "text": "there"}]}]
    tools = [{"type": "function", "function": {"name": "get_weather",
              "description": "w", "parameters": {"type": "object",
              "properties": {"city": {"type": "string"}},
              "required": ["city"]}}}]
    chats = [
        {"model": "default", "messages": msgs},
        {"model": "default", "messages": msgs, "stream": True,
         "stream_options": {"include_usage": True}, "max_tokens": 20,
         "temperature": 0.5, "top_p": 0.9, "seed": 7, "stop": ["\n", "END"],
         "presence_penalty": 0.1, "frequency_penalty": 0.2,
         "logit_bias": {"42": -100}, "n": 2, "user": "u"},
        {"model": "default", "messages": msgs + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function":
                 {"name": "get_weather", "arguments": "{\"city\":\"P\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
         "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False},
        {"model": "default", "messages": msgs, "tools": tools,
         "tool_choice": {"type": "function", "function":
                         {"name": "get_weather"}}},
        {"model": "default", "messages": msgs, "response_format":
         {"type": "json_schema", "json_schema": {"name": "r", "strict": True,
          "schema": SCHEMAS[0]}}, "logprobs": True, "top_logprobs": 5,
         "max_completion_tokens": 9},
        {"model": "default", "messages": msgs, "response_format":
         {"type": "json_object"}, "chat_template_kwargs":
         {"enable_thinking": False}, "reasoning_effort": "low"},
        {"model": "x", "messages": [{"role": "developer", "content": "d"},
                                    {"role": "user", "content": "\u00e9"}]},
    ]
    for c in chats:
        put("module_request", b"\x00" + json.dumps(c).encode())
        put("module_request", b"\x02" + json.dumps(c).encode())
    comps = [
        {"model": "default", "prompt": "Once upon"},
        {"model": "default", "prompt": ["Once"], "echo": True, "logprobs": 3,
         "max_tokens": 5, "stream": True, "stop": "x", "best_of": 1},
        {"model": "default", "prompt": "x", "suffix": "y"},
    ]
    for c in comps:
        put("module_request", b"\x01" + json.dumps(c).encode())
    put("module_request", b"\x00{\"model\":1}")
    put("module_request", b"\x00[1,2]")
    put("module_request", b"\x00{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}")
    embeds = [
        {"model": "e", "input": "The quick brown fox"},
        {"model": "e", "input": ["a", "b c"], "encoding_format": "base64",
         "dimensions": 64, "user": "u"},
        {"model": "e", "input": [1, 2, 3], "encoding_format": "float"},
        {"model": "e", "input": [[1, 2], [3]]},
        {"model": "e", "input": ["a", 1]},
        {"model": "e", "input": []},
    ]
    for c in embeds:
        put("module_request", b"\x04" + json.dumps(c).encode())
        put("module_request", b"\x06" + json.dumps(c).encode())


# /v1/responses bodies (byte 0 bit 3)
def module_responses():
    tools = [{"type": "function", "name": "get_weather", "description": "w",
              "parameters": {"type": "object", "properties":
                             {"city": {"type": "string"}},
                             "required": ["city"]}, "strict": True}]
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "message", "role": "assistant", "content":
              [{"type": "output_text", "text": "Let me look."}]},
             {"type": "function_call", "call_id": "call_1",
              "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
             {"type": "reasoning", "id": "rs_1", "summary": []},
             {"type": "function_call_output", "call_id": "call_1",
              "output": "18C"},
             {"type": "message", "role": "developer", "content":
              [{"type": "input_text", "text": "Be brief."}]}]
    bodies = [
        {"model": "m", "input": "Hi"},
        {"model": "m", "input": items, "instructions": "Be helpful.",
         "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False,
         "max_output_tokens": 50, "temperature": 0.5, "top_p": 0.9,
         "stream": True, "store": False, "metadata": {"a": "b"},
         "truncation": "auto", "reasoning": {"effort": "low",
                                             "summary": "auto"}},
        {"model": "m", "input": "Hi", "tools": tools, "tool_choice":
         {"type": "function", "name": "get_weather"}},
        {"model": "m", "input": "JSON", "text": {"format":
         {"type": "json_schema", "name": "r", "strict": True,
          "schema": SCHEMAS[0]}, "verbosity": "low"}},
        {"model": "m", "input": "JSON", "text": {"format":
         {"type": "json_object"}}, "seed": 3, "top_k": 5},
        {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}],
         "previous_response_id": "resp_1"},
        {"model": "m", "input": [{"role": "user", "content":
         [{"type": "input_image", "image_url": "x"}]}]},
    ]
    for c in bodies:
        put("module_request", b"\x08" + json.dumps(c).encode())
        put("module_request", b"\x0a" + json.dumps(c).encode())


if __name__ == "__main__":
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build")
    tokenizer()
    template()
    grammar()
    gguf(build)
    module_request()
    module_responses()
