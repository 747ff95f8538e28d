// Tool calls through the gateway with the official openai SDK
// (docs/TOOLS.md): forced calls (tool_choice named and required) arrive as
// the SDK expects, non-streamed and streamed, and the SDK's stream helper
// assembles them; their arguments validate against the tool's parameters with
// ajv (not the engine's own code).  A follow-up request carrying the
// assistant's tool_calls and a tool result is answered; its body, with
// arguments as objects the way the engine renders them, and its prompt_tokens
// are written to $LLM_DUMP for t/tool_sdk.t to check against llm-template.
// Env: LLM_URL, LLM_KEY, LLM_MODEL (default tiny), LLM_DUMP (a directory).

import test from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import Ajv from 'ajv';

const client = new OpenAI({ baseURL: process.env.LLM_URL, apiKey: process.env.LLM_KEY, maxRetries: 0 });
const model = process.env.LLM_MODEL || 'tiny';
const ajv = new Ajv({ strict: false });

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
          days: { type: 'integer' },
        },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'lookup_order',
      description: 'An order by id',
      parameters: {
        type: 'object',
        properties: {
          order_id: { type: 'string' },
          lines: { type: 'array', items: { type: 'integer' }, maxItems: 2 },
        },
        required: ['order_id'],
        additionalProperties: false,
      },
    },
  },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkCall(call, names) {
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, 'function');
  assert.ok(names.includes(call.function.name), `name ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  const v = validators[call.function.name];
  assert.ok(v(args), `arguments ${call.function.arguments}: ${ajv.errorsText(v.errors)}`);
  return args;
}

const named = { type: 'function', function: { name: 'get_weather' } };
const base = { model, messages, tools, max_tokens: 1200, temperature: 0.7 };
let firstCall = null;

test('non-streamed named tool call', async () => {
  const r = await client.chat.completions.create({ ...base, tool_choice: named, parallel_tool_calls: false, seed: 11 });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.role, 'assistant');
  assert.ok(m.content === null || m.content === '', `content ${m.content}`);
  assert.equal(m.tool_calls.length, 1);
  checkCall(m.tool_calls[0], ['get_weather']);
  firstCall = m.tool_calls[0];
});

test('streamed named tool call, assembled by the SDK stream helper', async () => {
  const helper = client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions;
  const stream = helper.stream({ ...base, tool_choice: named, parallel_tool_calls: false, seed: 11, stream: true });
  let deltas = 0, nameFirst = null;
  stream.on('chunk', (chunk) => {
    for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) {
      deltas++;
      if (nameFirst === null) nameFirst = tc.function?.name ?? '';
    }
  });
  const done = await stream.finalChatCompletion();
  const m = done.choices[0].message;
  assert.equal(done.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  checkCall(m.tool_calls[0], ['get_weather']);
  assert.equal(nameFirst, 'get_weather', 'the first delta carries the name');
  assert.ok(deltas > 2, `arguments arrive in fragments (${deltas} deltas)`);
  // the same seed gives the same call, streamed or not
  assert.equal(m.tool_calls[0].function.arguments, firstCall.function.arguments);
});

test('required with parallel calls: every call validates', async () => {
  let total = 0;
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({ ...base, tool_choice: 'required', parallel_tool_calls: true, seed });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.ok(m.tool_calls.length >= 1);
    for (const c of m.tool_calls) checkCall(c, ['get_weather', 'lookup_order']);
    assert.equal(new Set(m.tool_calls.map((c) => c.id)).size, m.tool_calls.length, 'ids differ');
    total += m.tool_calls.length;
  }
  assert.ok(total >= 4);
});

test('parallel_tool_calls false: exactly one call', async () => {
  for (const seed of [5, 6, 7]) {
    const r = await client.chat.completions.create({ ...base, tool_choice: 'required', parallel_tool_calls: false, seed });
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    checkCall(r.choices[0].message.tool_calls[0], ['get_weather', 'lookup_order']);
  }
});

test('unsupported schema keyword is a 400 naming the tool', async () => {
  const bad = [tools[0], { type: 'function', function: { name: 'zip', parameters: { type: 'object', properties: { z: { type: 'string', pattern: '^[0-9]+$' } } } } }];
  await assert.rejects(
    client.chat.completions.create({ ...base, tools: bad, tool_choice: 'required' }),
    (e) => e.status === 400 && e.param === 'tools[1].function.parameters' && /pattern/.test(e.message),
  );
});

test('follow-up with the tool result renders through the template', async () => {
  assert.ok(firstCall, 'the first test made a call');
  const result = 'RESULT-7781: sunny, 24 degrees';
  const follow = [
    ...messages,
    { role: 'assistant', content: null, tool_calls: [firstCall] },
    { role: 'tool', tool_call_id: firstCall.id, content: result },
  ];
  const r = await client.chat.completions.create({ model, messages: follow, tools, max_tokens: 4, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  const asRendered = follow.map((m) => (m.tool_calls
    ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) }
    : m));
  if (process.env.LLM_DUMP) {
    writeFileSync(`${process.env.LLM_DUMP}/followup.json`, JSON.stringify({ messages: asRendered, tools }));
    writeFileSync(`${process.env.LLM_DUMP}/followup.tokens`, `${r.usage.prompt_tokens}\n`);
  }
  // without the tool messages the prompt is shorter by at least the result
  const r0 = await client.chat.completions.create({ model, messages, tools, max_tokens: 1, temperature: 0 });
  assert.ok(r.usage.prompt_tokens > r0.usage.prompt_tokens + 8, `${r.usage.prompt_tokens} vs ${r0.usage.prompt_tokens}`);
});
