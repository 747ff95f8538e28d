// DeepSeek-V3.1 (deepseek2, MLA) and Qwen3.5 MoE (qwen35moe) through the
// gateway with the official openai client (t/arch_clients.t starts nginx
// and engines on llm-mkmodel's tiny-deepseek2 and tiny-qwen35moe with the
// models' own templates):
//
//  - forced tool calls (tool_choice "required" and named, streamed and
//    not) on both random-weight models: finish_reason tool_calls, one
//    call named as asked, arguments valid with ajv against the tool's
//    parameters (deepseek-v3's JSON calls, qwen3-coder's XML calls under
//    the tool grammar), no content beside it;
//  - reasoning: both templates open <think> for the answer when thinking
//    is on (Qwen3.5 by default, DeepSeek-V3.1 with chat_template_kwargs
//    thinking), so what the model writes arrives as reasoning_content
//    deltas, before any content, with no <think> markup in either.
//
//   LLM_URL=http://127.0.0.1:PORT/v1 node arch_clients.mjs
//
// Prints TAP; exits non-zero on any failure.

import Ajv from 'ajv';
import { ok, done, fn, streamed, whole, forcedCalls } from './chat_lib.mjs';

const N = Number(process.env.LLM_N || 8);

// a random model may write a free string until max_tokens (deepseek's
// JSON strings, qwen3-coder's raw values): enums, booleans and integers
const tools = {
  qwen: [
    fn('set_temp', {
      type: 'object',
      properties: { unit: { type: 'string', enum: ['c', 'f'] }, eco: { type: 'boolean' },
                    level: { type: 'integer' } },
      required: ['unit', 'eco'], additionalProperties: false,
    }),
    fn('ping', { type: 'object', properties: {}, additionalProperties: false }),
  ],
};
tools.deepseek = tools.qwen;
const ajv = new Ajv({ strict: false });
const validate = {};
for (const [m, set] of Object.entries(tools)) {
  validate[m] = Object.fromEntries(set.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
}


// (a) forced tool calls, thinking off (the answer is the call)
const noThink = { deepseek: {}, qwen: { reasoning_effort: 'none' } };
for (const model of ['deepseek', 'qwen']) {
  await forcedCalls(model, tools[model], validate[model], ajv, N, 200, noThink[model]);
}

// (b) reasoning: the template opens <think>, the model's text is thinking
const think = { deepseek: { chat_template_kwargs: { thinking: true } }, qwen: {} };
for (const model of ['deepseek', 'qwen']) {
  const req = { model, max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: 'Why is the sky blue?' }],
                ...think[model] };
  const r = await streamed(req);
  ok(r.nReasoning >= 2 && r.reasoning.length > 0,
     `${model}: the thinking streams as reasoning_content (${r.nReasoning} deltas)`, JSON.stringify(r));
  ok(r.contentFirst < 0 || r.reasoningLast < r.contentFirst,
     `${model}: every reasoning delta comes before the content`, JSON.stringify(r));
  ok(!/<\/?think>/.test(r.reasoning + r.content), `${model}: no <think> markup in the answer`,
     JSON.stringify(r));
  const w = await whole(req);
  ok(w.reasoning === r.reasoning && w.content === r.content,
     `${model}: the whole answer has the same reasoning and content`, JSON.stringify({ w, r }));
}

done();
