// Clients of /v1/responses, changed only in baseURL and key: the openai
// SDK 6.x (responses.create, responses.stream and its final response, a
// tool round trip, responses.parse with zodTextFormat) and the Vercel AI
// SDK 5 with @ai-sdk/openai 2, whose default provider openai("model")
// speaks the Responses API (generateText, streamText with a tool over
// several steps, generateObject).  Models: LLM_TOOL_MODEL (demo: trained
// to call lookup_order, then to answer from its result) and LLM_MODEL
// (tiny: random weights, so its JSON comes from constrained decoding).
//
//   LLM_URL=http://127.0.0.1:PORT/v1 LLM_KEY=sk-... node sdk.mjs
//
// Prints TAP; exits non-zero on any failure.

import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText, generateObject, tool, stepCountIs } from 'ai';
import { z } from 'zod';

const baseURL = process.env.LLM_URL;
const apiKey = process.env.LLM_KEY;
const tiny = process.env.LLM_MODEL || 'tiny';
const demo = process.env.LLM_TOOL_MODEL || 'demo';

let n = 0, failed = 0;
function ok(cond, name, extra) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && extra !== undefined) console.log(`# ${JSON.stringify(extra).slice(0, 600)}`);
}
async function check(name, f) {
  try {
    await f();
  } catch (e) {
    ok(false, `${name}: ${e.constructor.name}: ${e.message}`.slice(0, 300));
  }
}

// what the clients put on the wire
const sent = [];
const spy = (url, init) => { sent.push({ url: String(url), body: init && init.body ? JSON.parse(init.body) : null }); return fetch(url, init); };
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, fetch: spy });

const tools = [
  { type: 'function', name: 'lookup_order', description: 'Look up an order.', strict: false,
    parameters: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] } },
];
const result = (order_id) => ({ order_id, status: 'shipped', carrier: 'UPS', date: 'June 3' });
const shape = z.object({ ok: z.boolean(), size: z.enum(['small', 'large']) });

await check('responses.create', async () => {
  const r = await client.responses.create({ model: tiny, input: 'Say hi', max_output_tokens: 8, temperature: 0 });
  ok(/^resp_/.test(r.id) && r.object === 'response', 'create: a response', r);
  ok(typeof r.output_text === 'string' && r.output_text.length > 0, 'create: the SDK\'s output_text', r.output_text);
  ok(r.usage.output_tokens === 8 && r.status === 'incomplete'
     && r.incomplete_details.reason === 'max_output_tokens', 'create: 8 tokens, incomplete', r.usage);
  ok(r._request_id === r.id, 'create: _request_id is the id');
});

await check('responses.stream', async () => {
  const s = client.responses.stream({ model: tiny, input: 'Say hi', max_output_tokens: 16, temperature: 0 });
  let deltas = '', types = [];
  s.on('response.output_text.delta', (e) => { deltas += e.delta; });
  for await (const e of s) types.push(e.type);
  const r = await s.finalResponse();
  ok(types[0] === 'response.created' && ['response.completed', 'response.incomplete'].includes(types.at(-1)),
     'stream: created first, completed/incomplete last', types);
  ok(r.output_text === deltas && deltas.length > 0, 'stream: the final response\'s text is the deltas', [r.output_text, deltas]);
  const same = await client.responses.create({ model: tiny, input: 'Say hi', max_output_tokens: 16, temperature: 0 });
  ok(same.output_text === r.output_text, 'stream: the text of the same request not streamed (greedy)');
  ok(r.usage && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, 'stream: usage', r.usage);
});

await check('tool round trip', async () => {
  const input = [{ role: 'user', content: 'order 68405 status please' }];
  const r = await client.responses.create({ model: demo, input, tools, temperature: 0, max_output_tokens: 60 });
  const call = r.output.find((o) => o.type === 'function_call');
  ok(call && call.name === 'lookup_order' && /^call_/.test(call.call_id), 'tools: a lookup_order call', r.output);
  const args = JSON.parse(call.arguments);
  ok(typeof args.order_id === 'string', 'tools: arguments parse', call.arguments);
  input.push(...r.output);      // as the SDK's docs show: the output items back as input
  input.push({ type: 'function_call_output', call_id: call.call_id, output: JSON.stringify(result(args.order_id)) });
  const r2 = await client.responses.create({ model: demo, input, tools, temperature: 0, max_output_tokens: 60 });
  ok(r2.status === 'completed' && r2.output_text.length > 0
     && !r2.output.some((o) => o.type === 'function_call'), 'tools: an answer from the result', r2.output_text);
  ok(/UPS|ship|deliver|June 3/i.test(r2.output_text), 'tools: the answer uses the result', r2.output_text);
});

await check('responses.parse', async () => {
  const r = await client.responses.parse({ model: tiny, input: 'An answer as JSON', max_output_tokens: 400,
                                           temperature: 0.8, text: { format: zodTextFormat(shape, 'answer') } });
  const p = r.output_parsed;
  ok(p && typeof p.ok === 'boolean' && ['small', 'large'].includes(p.size), 'parse: output_parsed fits the zod schema', r.output_text);
  ok(sent.at(-1).body.text.format.type === 'json_schema', 'parse: sent as text.format json_schema');
});

// the AI SDK's default provider: the Responses API
const openai = createOpenAI({ baseURL, apiKey, fetch: spy });

await check('generateText', async () => {
  const before = sent.length;
  const r = await generateText({ model: openai(tiny), prompt: 'Say hi', maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
  ok(sent[before].url.endsWith('/responses'), 'generateText: POST /responses', sent[before].url);
  ok(r.text.length > 0 && r.finishReason === 'length', 'generateText: text, finish length', [r.text, r.finishReason]);
  ok(r.usage.outputTokens === 8 && r.usage.inputTokens > 0, 'generateText: usage', r.usage);
});

await check('streamText with a tool', async () => {
  let executed = 0, streamError = null;
  const before = sent.length;
  const r = streamText({
    model: openai(demo), prompt: 'order 68405 status please', temperature: 0, maxOutputTokens: 60, maxRetries: 0,
    tools: {
      lookup_order: tool({ description: 'Look up an order.', inputSchema: z.object({ order_id: z.string() }),
                           execute: async ({ order_id }) => { executed++; return result(order_id); } }),
    },
    stopWhen: stepCountIs(3),
    onError: ({ error }) => { streamError = error; },
  });
  let text = '';
  for await (const t of r.textStream) text += t;
  const steps = await r.steps;
  ok(streamError === null, 'streamText: no error', streamError && [streamError.message, streamError.responseBody]);
  ok(executed === 1, 'streamText: the tool ran once', executed);
  ok(steps.length === 2 && steps[0].toolCalls.length === 1 && steps[0].toolCalls[0].toolName === 'lookup_order',
     'streamText: step 1 called lookup_order, step 2 answered', steps.map((s) => s.finishReason));
  ok(text.length > 0 && text === steps[1].text, 'streamText: the streamed text is the answer', text);
  ok(/UPS|ship|deliver|June 3/i.test(text), 'streamText: the answer uses the result', text);
  const second = sent.slice(before)[1];
  ok(second && second.body.input.some((i) => i.type === 'function_call_output'),
     'streamText: step 2 sent the tool output', second && second.body.input);
});

await check('generateObject', async () => {
  const r = await generateObject({ model: openai(tiny), schema: shape, prompt: 'An answer as JSON',
                                   maxOutputTokens: 400, temperature: 0.8, maxRetries: 0 });
  ok(typeof r.object.ok === 'boolean' && ['small', 'large'].includes(r.object.size), 'generateObject: the object', r.object);
  ok(sent.at(-1).body.text.format.type === 'json_schema', 'generateObject: text.format json_schema');
});

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
