// The official Anthropic SDK against /v1/messages, changed only in
// baseURL and key: messages.create, messages.stream (text events and
// finalMessage), a tool use round trip (tool_use, then the tool_result
// sent back), countTokens, and the gateway's errors as the SDK's error
// classes.
//
//   LLM_BASE=http://127.0.0.1:PORT LLM_KEY=sk-... node messages.mjs
//
// Env: LLM_MODEL (tiny), LLM_LIMITED (a key with rpm=1, for the 429).
// Prints TAP; exits non-zero on any failure.

import Anthropic, {
  AuthenticationError, BadRequestError, NotFoundError, RateLimitError,
} from '@anthropic-ai/sdk';

const baseURL = process.env.LLM_BASE;
const apiKey = process.env.LLM_KEY;
const model = process.env.LLM_MODEL || 'tiny';

let n = 0, failed = 0;
function ok(cond, name, extra) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && extra !== undefined) console.log(`# ${JSON.stringify(extra).slice(0, 400)}`);
}

// greedy (temperature 0) where the test counts tokens: the test model's
// sampled text could end early
// what the SDK puts on the wire
const sent = [];
const spy = (url, init) => { sent.push({ url: String(url), headers: init.headers }); return fetch(url, init); };
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, fetch: spy });

const msg = await client.messages.create({
  model, max_tokens: 8, temperature: 0, system: 'You are terse.',
  messages: [{ role: 'user', content: 'Hello there' }],
});
ok(sent[0].url.endsWith('/v1/messages'), 'create: POST /v1/messages', sent[0].url);
ok(msg.type === 'message' && msg.role === 'assistant' && /^msg_/.test(msg.id), 'create: a Message', msg);
ok(msg.content.length === 1 && msg.content[0].type === 'text' && msg.content[0].text.length > 0,
   'create: one text block', msg.content);
ok(msg.stop_reason === 'max_tokens' && msg.usage.output_tokens === 8 && msg.usage.input_tokens > 0,
   'create: stop_reason max_tokens, usage', msg);

// streaming: the text events add up to finalMessage's text
const stream = client.messages.stream({
  model, max_tokens: 12, temperature: 0, messages: [{ role: 'user', content: 'Tell me a story' }],
});
let text = '';
let events = 0;
stream.on('text', (delta) => { text += delta; });
stream.on('streamEvent', () => { events++; });
const fin = await stream.finalMessage();
ok(fin.content[0]?.type === 'text' && fin.content[0].text === text && text.length > 0,
   'stream: text events = finalMessage text', { text, fin });
ok(fin.stop_reason === 'max_tokens' && fin.usage.output_tokens === 12, 'stream: stop_reason, usage', fin);
ok(events >= 6, 'stream: message_start, block start/delta/stop, message_delta, message_stop', events);

// a tool use round trip: the named tool, then its result
const tools = [{
  name: 'get_weather', description: 'The weather in a city',
  // an enum: the constrained call ends whatever the test model's weights
  input_schema: {
    type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } },
    required: ['city'], additionalProperties: false,
  },
}];
const total = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
const first = await client.messages.create({
  model, max_tokens: 200, tools, tool_choice: { type: 'tool', name: 'get_weather' },
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
});
const use = first.content.find((b) => b.type === 'tool_use');
ok(use && use.name === 'get_weather' && /^toolu_/.test(use.id) && typeof use.input === 'object'
   && ['Paris', 'Rome'].includes(use.input.city), 'tool: a tool_use block with a parsed input', first.content);
ok(first.stop_reason === 'tool_use', 'tool: stop_reason tool_use', first.stop_reason);
const second = await client.messages.create({
  model, max_tokens: 8, tools,
  messages: [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use?.id ?? 'x', content: 'sunny, 24 degrees' }] },
  ],
});
ok(second.type === 'message' && total(second.usage) > total(first.usage),
   'tool: the result sent back is in the prompt', { first: first.usage, second: second.usage });

// the streamed tool call assembled by the SDK
const ts = await client.messages.stream({
  model, max_tokens: 200, tools, tool_choice: { type: 'tool', name: 'get_weather' },
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
}).finalMessage();
const suse = ts.content.find((b) => b.type === 'tool_use');
ok(suse && ['Paris', 'Rome'].includes(suse.input.city) && ts.stop_reason === 'tool_use',
   'tool, streamed: input_json_delta assembled into the input', ts.content);

// countTokens: the prompt create counted
const count = await client.messages.countTokens({
  model, system: 'You are terse.', messages: [{ role: 'user', content: 'Hello there' }],
});
ok(count.input_tokens === total(msg.usage),
   'countTokens: the input tokens of the same request', { count, usage: msg.usage });

// errors as the SDK's classes
async function fails(cls, name, p) {
  try {
    await p;
    ok(false, name, 'no error');
  } catch (e) {
    ok(e instanceof cls && e.error?.type === 'error', name, { name: e?.constructor?.name, error: e?.error });
  }
}
await fails(BadRequestError, 'BadRequestError: no max_tokens',
  client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }));
await fails(NotFoundError, 'NotFoundError: an unknown model',
  client.messages.create({ model: 'no-such-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }));
await fails(AuthenticationError, 'AuthenticationError: a bad key',
  new Anthropic({ baseURL, apiKey: 'sk-bad', maxRetries: 0 }).messages.create(
    { model, max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }));
if (process.env.LLM_LIMITED) {
  const limited = new Anthropic({ baseURL, apiKey: process.env.LLM_LIMITED, maxRetries: 0 });
  await limited.messages.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] });
  await fails(RateLimitError, 'RateLimitError: over the key\'s requests per minute',
    limited.messages.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }));
}

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
