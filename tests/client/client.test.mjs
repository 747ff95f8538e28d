// The official openai SDK against the gateway: what users run unchanged
// with only baseURL and apiKey changed.  Env: LLM_URL (…/v1), LLM_KEY
// (a key without tight limits), LLM_LIMITED (a key allowed one request
// per minute; optional), LLM_MODEL (default tiny).

import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.LLM_URL;
const apiKey = process.env.LLM_KEY;
const model = process.env.LLM_MODEL || 'tiny';
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Hello there' }];

test('chat, non-streaming', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat, streaming with include_usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null, first = null, n = 0;
  for await (const chunk of stream) {
    n++;
    if (!first) first = chunk;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.choices.length) {
      text += chunk.choices[0].delta.content ?? '';
      finish = chunk.choices[0].finish_reason ?? finish;
    } else {
      usage = chunk.usage;
    }
  }
  assert.equal(first.choices[0].delta.role, 'assistant');
  assert.equal(finish, 'length');
  assert.ok(usage && usage.completion_tokens === 6, 'usage chunk');
  assert.ok(n >= 3);
  const r = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0 });
  assert.equal(text, r.choices[0].message.content, 'stream text equals JSON text');
});

test('legacy completions', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
});

test('models', async () => {
  const list = await client.models.list();
  assert.ok(list.data.some((m) => m.id === model));
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
});

test('tools are accepted', async () => {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 8,
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
    tool_choice: 'auto',
  });
  const c = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason));
  for (const call of c.message.tool_calls ?? []) {
    assert.equal(call.type, 'function');
    assert.equal(typeof call.function.arguments, 'string');
  }
});

test('bad tool schema is a BadRequestError with its param', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages,
      tools: [{ type: 'function', function: { name: 'f', parameters: 'not a schema' } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400
      && e.param === 'tools[0].function.parameters');
});

test('temperature out of range is a BadRequestError', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature'
      && e.code === 'decimal_above_max_value');
});

test('unknown model is a NotFoundError', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
});

test('wrong key is an AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'sk-llm-wrong', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model, messages }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('over the rate limit is a RateLimitError', { skip: !process.env.LLM_LIMITED }, async () => {
  const lim = new OpenAI({ baseURL, apiKey: process.env.LLM_LIMITED, maxRetries: 0 });
  await lim.chat.completions.create({ model, messages, max_tokens: 1 });
  await assert.rejects(lim.chat.completions.create({ model, messages, max_tokens: 1 }),
    (e) => e instanceof OpenAI.RateLimitError && e.status === 429
      && typeof e.headers['retry-after'] === 'string');
});
