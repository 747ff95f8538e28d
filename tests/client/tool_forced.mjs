// Forced tool calls through the gateway with the official openai client:
// a seeded loop of requests with tool_choice "required" or a named
// function, parallel_tool_calls on and off, streamed and not, on tool sets
// whose parameters have nested objects, arrays, enums, nullable types and
// $ref.  Every answer must end with finish_reason tool_calls, every call
// must name one of the tools (the named one when named), and its arguments
// must parse and validate with ajv against that tool's parameters.
//
//   LLM_URL=http://127.0.0.1:PORT/v1 LLM_KEY=sk-... node tool_forced.mjs
//
// Env: LLM_MODEL (tiny), LLM_N (requests, 100), LLM_CONC (in flight, 4),
// LLM_MAX_TOKENS (1000).  Prints TAP; exits non-zero on any failure.

import OpenAI from 'openai';
import Ajv from 'ajv';

const client = new OpenAI({ baseURL: process.env.LLM_URL, apiKey: process.env.LLM_KEY,
                            maxRetries: 0, timeout: 120000 });
const model = process.env.LLM_MODEL || 'tiny';
const N = Number(process.env.LLM_N || 100);
const CONC = Number(process.env.LLM_CONC || 4);
const MAX_TOKENS = Number(process.env.LLM_MAX_TOKENS || 1000);

const fn = (name, parameters) => ({ type: 'function', function: { name, description: name, parameters } });

const toolSets = [
  [
    fn('get_weather', {
      type: 'object',
      properties: {
        city: { type: 'string' },
        unit: { enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer' },
      },
      required: ['city', 'unit'],
      additionalProperties: false,
    }),
    fn('get_time', { type: 'object', properties: { tz: { type: ['string', 'null'] } }, required: ['tz'] }),
  ],
  [
    fn('create_order', {
      type: 'object',
      properties: {
        customer: {
          type: 'object',
          properties: { id: { type: 'integer' }, vip: { type: 'boolean' } },
          required: ['id', 'vip'],
          additionalProperties: false,
        },
        lines: {
          type: 'array', minItems: 1, maxItems: 3,
          items: {
            type: 'object',
            properties: { sku: { enum: ['A1', 'B2', 'C3'] }, qty: { type: 'integer' }, price: { type: 'number' } },
            required: ['sku', 'qty'],
            additionalProperties: false,
          },
        },
        note: { anyOf: [{ type: 'string' }, { type: 'null' }] },
      },
      required: ['customer', 'lines', 'note'],
      additionalProperties: false,
    }),
    fn('cancel_order', {
      type: 'object',
      properties: { order_id: { type: 'integer' }, reason: { enum: ['late', 'wrong', 'other'] } },
      required: ['order_id', 'reason'],
      additionalProperties: false,
    }),
    fn('ping', { type: 'object', properties: {}, additionalProperties: false }),
  ],
  [
    fn('move', {
      $defs: { point: { type: 'object', properties: { x: { type: 'number' }, y: { type: 'number' } },
                        required: ['x', 'y'], additionalProperties: false } },
      type: 'object',
      properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' },
                    path: { type: 'array', items: { $ref: '#/$defs/point' }, maxItems: 2 } },
      required: ['from', 'to'],
      additionalProperties: false,
    }),
    fn('search', {
      type: 'object',
      properties: { q: { type: 'string' }, tags: { type: 'array', items: { type: 'string' }, maxItems: 3 },
                    limit: { type: 'integer' } },
      required: ['q'],
    }),
  ],
];

const ajv = new Ajv({ strict: false });
const validators = toolSets.map((set) => Object.fromEntries(
  set.map((t) => [t.function.name, ajv.compile(t.function.parameters)])));
// Not below 0.7: a random-weight model at low temperature can loop inside a
// string until max_tokens (finish_reason length, as OpenAI ends such an
// answer), which says nothing about the tool grammar.
const temps = [0.7, 1.0, 1.2, 1.5];

async function one(i) {
  const s = i % toolSets.length;
  const tools = toolSets[s];
  const named = i % 2 === 1 ? tools[(i >> 1) % tools.length].function.name : null;
  const parallel = i % 4 < 2;
  const stream = i % 3 === 0;
  const req = {
    model, tools, max_tokens: MAX_TOKENS, seed: 1000 + i, temperature: temps[i % temps.length],
    messages: [{ role: 'user', content: `Request ${i}: do what the tools allow.` }],
    tool_choice: named ? { type: 'function', function: { name: named } } : 'required',
    parallel_tool_calls: parallel,
  };
  const label = `#${i} set ${s} ${named ? `named ${named}` : 'required'}${parallel ? ' parallel' : ''}${stream ? ' stream' : ''}`;
  let choice;
  if (stream) {
    const helper = client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions;
    choice = (await helper.stream({ ...req, stream: true }).finalChatCompletion()).choices[0];
  } else {
    choice = (await client.chat.completions.create(req)).choices[0];
  }
  const errs = [];
  const calls = choice.message.tool_calls ?? [];
  // cut short by max_tokens: the calls before the last must still be whole
  const cut = choice.finish_reason === 'length';
  if (choice.finish_reason !== 'tool_calls' && !cut) errs.push(`finish_reason ${choice.finish_reason}`);
  if (calls.length === 0) errs.push('no tool call');
  if (!parallel && calls.length > 1) errs.push(`${calls.length} calls with parallel_tool_calls false`);
  for (const [k, c] of calls.entries()) {
    if (cut && k === calls.length - 1) {
      if (named && c.function.name !== named) errs.push(`called ${c.function.name}, not ${named}`);
      if (!validators[s][c.function.name]) errs.push(`unknown tool ${c.function.name}`);
      continue;
    }
    const v = validators[s][c.function.name];
    if (!/^call_[A-Za-z0-9]{24}$/.test(c.id)) errs.push(`id ${c.id}`);
    if (!v) { errs.push(`unknown tool ${c.function.name}`); continue; }
    if (named && c.function.name !== named) errs.push(`called ${c.function.name}, not ${named}`);
    let args;
    try { args = JSON.parse(c.function.arguments); } catch (e) {
      errs.push(`arguments do not parse: ${c.function.arguments.slice(0, 200)}`);
      continue;
    }
    if (!v(args)) errs.push(`${c.function.name} ${c.function.arguments.slice(0, 200)}: ${ajv.errorsText(v.errors)}`);
  }
  return { label, errs, calls: calls.length - (cut ? 1 : 0), cut };
}

let next = 0, failed = 0, calls = 0, multi = 0, cuts = 0;
async function worker() {
  while (next < N) {
    const i = next++;
    let r;
    try { r = await one(i); } catch (e) { r = { label: `#${i}`, errs: [`request failed: ${e.message}`], calls: 0 }; }
    calls += r.calls;
    multi += r.calls > 1;
    if (r.cut) {
      cuts++;
      console.log(`# ${r.label}: cut short by max_tokens inside a call`);
    }
    if (r.errs.length) {
      failed++;
      console.log(`# ${r.label}: ${r.errs.join('; ')}`);
    }
  }
}
await Promise.all(Array.from({ length: CONC }, worker));
// a random model can loop inside a string until max_tokens; rarely
const tooMany = cuts > Math.max(1, Math.floor(N * 0.02));
console.log(`${failed || tooMany ? 'not ok' : 'ok'} 1 - ${N} forced tool-call requests: ${calls} whole calls `
            + `(${multi} answers with several), all valid unless failed; ${cuts} cut short by max_tokens, `
            + `${failed} failed`);
process.exit(failed || tooMany ? 1 : 0);
