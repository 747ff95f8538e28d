// What the chat-format suites (chat_formats.mjs, arch_clients.mjs) share:
// TAP output, the OpenAI client, tool definitions, and an answer put
// together from a stream or taken whole.

import OpenAI from 'openai';

export const client = new OpenAI({ baseURL: process.env.LLM_URL, apiKey: 'none',
                                   maxRetries: 0, timeout: 120000 });

let n = 0, failed = 0;

// One TAP point; why is printed under a failure.
export function ok(cond, name, why) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && why) console.log(`# ${String(why).slice(0, 600)}`);
}

// The plan, and the exit status: non-zero on any failure.
export function done() {
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}

export const fn = (name, parameters) => ({ type: 'function', function: { name, description: name, parameters } });

// A streamed answer put together from its chunks, as a client does, with
// the order of the reasoning and content deltas.
export async function streamed(req) {
  const s = await client.chat.completions.create({ ...req, stream: true });
  const r = { content: '', reasoning: '', calls: [], finish: null, nReasoning: 0, contentFirst: -1,
              reasoningLast: -1, chunks: 0, both: 0 };
  for await (const chunk of s) {
    const c = chunk.choices?.[0];
    if (!c) continue;
    const d = c.delta ?? {};
    r.chunks++;
    if (d.reasoning_content) {
      r.reasoning += d.reasoning_content;
      r.nReasoning++;
      r.reasoningLast = r.chunks;
    }
    if (d.content) {
      r.content += d.content;
      if (r.contentFirst < 0) r.contentFirst = r.chunks;
    }
    if (d.reasoning_content && d.content) r.both++;
    for (const t of d.tool_calls ?? []) {
      const k = t.index;
      r.calls[k] ??= { id: '', name: '', arguments: '' };
      if (t.id) r.calls[k].id = t.id;
      if (t.function?.name) r.calls[k].name += t.function.name;
      if (t.function?.arguments) r.calls[k].arguments += t.function.arguments;
    }
    if (c.finish_reason) r.finish = c.finish_reason;
  }
  return r;
}

export async function whole(req) {
  const res = await client.chat.completions.create(req);
  const c = res.choices[0];
  return { content: c.message.content ?? '', reasoning: c.message.reasoning_content ?? '',
           calls: (c.message.tool_calls ?? []).map((t) => ({ id: t.id, ...t.function })),
           finish: c.finish_reason, usage: res.usage };
}

// N forced tool calls on model (tool_choice "required" and named in
// turn, streamed and not; extra joins each request): each must end with
// finish_reason tool_calls, one call of a tool of set (named as asked),
// an OpenAI call id, arguments valid with the ajv validators of
// validate (by name), and no content or reasoning beside it; or, for at
// most a quarter of them, cut short by max_tokens inside one call's
// arguments (random weights can write a string past any budget).  One
// TAP point.
export async function forcedCalls(model, set, validate, ajv, N, seed, extra = {}) {
  let good = 0, cut = 0;
  const bad = [];
  for (let i = 0; i < N; i++) {
    const named = i % 2 === 1 ? set[(i >> 1) % 2].function.name : null;
    const stream = i % 4 >= 2;
    const req = {
      model, tools: set, max_tokens: 400, temperature: 0.8, seed: seed + i,
      messages: [{ role: 'user', content: `Request ${i}: use a tool.` }],
      tool_choice: named ? { type: 'function', function: { name: named } } : 'required',
      parallel_tool_calls: false, ...extra,
    };
    let r;
    try {
      r = stream ? await streamed(req) : await whole(req);
    } catch (e) {
      bad.push(`#${i}: ${e.message}`);
      continue;
    }
    const errs = [];
    if (r.finish === 'length') {
      // a random-weight model may write a string argument past
      // max_tokens: the call so far must be a JSON object begun, and at
      // most a quarter of the requests may end so
      cut++;
      if (r.calls.length > 1 || r.content || r.reasoning
          || r.calls.some((c) => !/^\s*\{/.test(c.arguments))) {
        bad.push(`#${i}: cut short, and not inside one call's arguments: `
                 + JSON.stringify(r.calls) + ` content [${r.content}]`);
      }
      continue;
    }
    if (r.finish !== 'tool_calls') errs.push(`finish_reason ${r.finish}`);
    if (r.calls.length !== 1) errs.push(`${r.calls.length} calls`);
    if (r.content || r.reasoning) errs.push(`content [${r.content}] reasoning [${r.reasoning}]`);
    for (const c of r.calls) {
      const v = validate[c.name];
      if (!/^call_[A-Za-z0-9]{24}$/.test(c.id)) errs.push(`id ${c.id}`);
      if (!v) { errs.push(`unknown tool ${c.name}`); continue; }
      if (named && c.name !== named) errs.push(`called ${c.name}, not ${named}`);
      let args;
      try { args = JSON.parse(c.arguments); } catch { errs.push(`arguments do not parse: ${c.arguments}`); continue; }
      if (!v(args)) errs.push(`${c.name} ${c.arguments}: ${ajv.errorsText(v.errors)}`);
    }
    if (errs.length) bad.push(`#${i}${stream ? ' stream' : ''}${named ? ` named ${named}` : ''}: ${errs.join('; ')}`);
    else good++;
  }
  ok(bad.length === 0 && cut <= N / 4, `${model}: ${good} of ${N} forced calls (required and named, streamed and not) `
     + `parse and validate against their schema, ${cut} cut short by max_tokens inside the arguments`,
     bad.join(' | '));
}
