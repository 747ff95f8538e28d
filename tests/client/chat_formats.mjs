// gpt-oss's harmony and GLM-4.5's chat formats through the gateway with
// the official openai client (t/chat_formats.t starts nginx and the
// engines on llm-mkmodel models with the models' own templates):
//
//  - forced tool calls (tool_choice "required" and named, streamed and
//    not) on the random-weight models "oss" (harmony), "glm" (GLM's
//    XML calls) and "glm47" (GLM-4.7's compact form of them):
//    finish_reason tool_calls, one call named as asked,
//    arguments valid with ajv against the tool's parameters, no content
//    and no reasoning beside it;
//  - reasoning_effort on "oss" and "glm": usage.prompt_tokens of each
//    effort, and (oss-cache, prefix caching on) the cached tokens when an
//    effort follows the same or another one, written to
//    $LLM_DUMP/efforts.json for the .t to check against llm-template;
//  - reasoning streamed on "oss-script" and "glm-script" (models whose
//    greedy decoding writes a known reply: harmony analysis then final,
//    <think> then the answer): the thinking arrives as several
//    reasoning_content deltas, all before the first content delta, the
//    content only the final channel's text, no markup anywhere; the
//    non-streamed answer is the same.
//
//   LLM_URL=http://127.0.0.1:PORT/v1 LLM_DUMP=DIR node chat_formats.mjs
//
// Prints TAP; exits non-zero on any failure.

import fs from 'node:fs';
import Ajv from 'ajv';
import { client, ok, done, fn, streamed, whole, forcedCalls } from './chat_lib.mjs';

const dump = process.env.LLM_DUMP;
const N = Number(process.env.LLM_N || 16);

// harmony arguments are JSON: strings, numbers, arrays are fine; GLM's
// string values are raw text a random model never closes, so its tools
// take enums and booleans (arch_models.t)
const tools = {
  oss: [
    fn('get_weather', {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { enum: ['c', 'f'] }, days: { type: 'integer' },
                    tags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 } },
      required: ['city', 'unit'], additionalProperties: false,
    }),
    fn('ping', { type: 'object', properties: {}, additionalProperties: false }),
  ],
  glm: [
    fn('set_temp', {
      type: 'object',
      properties: { unit: { type: 'string', enum: ['c', 'f'] }, eco: { type: 'boolean' } },
      required: ['unit', 'eco'], additionalProperties: false,
    }),
    fn('ping', { type: 'object', properties: {}, additionalProperties: false }),
  ],
};
tools.glm47 = tools.glm;
const ajv = new Ajv({ strict: false });
const validate = {};
for (const [m, set] of Object.entries(tools)) {
  validate[m] = Object.fromEntries(set.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
}


// (a) forced tool calls; GLM-4.7's template opens <think> for the
// answer, and a thinking block is not constrained (a random model never
// closes it): none renders it closed, so the answer is the call
for (const model of ['oss', 'glm', 'glm47']) {
  await forcedCalls(model, tools[model], validate[model], ajv, N, 100,
                    model === 'glm47' ? { reasoning_effort: 'none' } : {});
}

// (b) reasoning_effort: the prompt as each effort renders it
const efforts = {};
const hi = { role: 'user', content: 'Why is the sky blue?' };
for (const [model, list] of [['oss', ['low', 'medium', 'high', '']], ['glm', ['none', '']]]) {
  for (const e of list) {
    const r = await whole({ model, max_tokens: 1, temperature: 0, messages: [hi],
                            ...(e ? { reasoning_effort: e } : {}) });
    efforts[`${model}:${e}`] = r.usage.prompt_tokens;
  }
}
// the same effort twice, then another: the prefix cache tells how much of
// the rendered prompt the two share
for (const e of ['high', 'high', 'low', 'low']) {
  const r = await whole({ model: 'oss-cache', max_tokens: 1, temperature: 0, messages: [hi], reasoning_effort: e });
  efforts[`cache:${Object.keys(efforts).filter((k) => k.startsWith('cache:')).length}:${e}`]
    = r.usage.prompt_tokens_details?.cached_tokens ?? -1;
}
fs.writeFileSync(`${dump}/efforts.json`, JSON.stringify(efforts));
ok(Object.values(efforts).every((v) => Number.isInteger(v) && v >= 0), 'reasoning_effort: every request answered',
   JSON.stringify(efforts));

// (c) reasoning streamed, content only from the final channel
const expect = { reasoning: 'Light scatters.', content: 'It is Rayleigh.' };
for (const model of ['oss-script', 'glm-script']) {
  const req = { model, max_tokens: 60, temperature: 0, messages: [hi] };
  const s = await streamed(req);
  ok(s.reasoning === expect.reasoning && s.content === expect.content,
     `${model} stream: reasoning_content [${s.reasoning}], content [${s.content}]`);
  ok(s.nReasoning >= 2, `${model} stream: the reasoning came as it was decoded (${s.nReasoning} deltas)`);
  ok(s.contentFirst > s.reasoningLast && s.both === 0,
     `${model} stream: every reasoning delta before the first content delta`);
  ok(s.finish === 'stop', `${model} stream: finish_reason ${s.finish}`);
  const w = await whole(req);
  ok(w.reasoning === expect.reasoning && w.content === expect.content && w.finish === 'stop',
     `${model}: message.reasoning_content and content the same`, JSON.stringify(w));
  ok(!/<\||<\/?think>/.test(s.content + s.reasoning + w.content + w.reasoning), `${model}: no markup in the text`);
}

done();
