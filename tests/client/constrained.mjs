// Constrained decoding through the gateway with the official openai
// client: a seeded loop of response_format json_object / json_schema
// requests (nested objects, arrays with min/maxItems, enums, anyOf,
// nullable types, $ref) at temperatures 0..1.5, every output validated by
// ajv (not by the engine's code); plus the 400 for an unsupported keyword.
//
//   LLM_URL=http://127.0.0.1:PORT/v1 LLM_KEY=sk-... node constrained.mjs
//
// Env: LLM_MODEL (tiny), LLM_N (requests, 400), LLM_CONC (in flight, 8),
// LLM_MAX_TOKENS (1500).  Prints TAP; exits non-zero on any failure.

import OpenAI from 'openai';
import Ajv from 'ajv';

const client = new OpenAI({ baseURL: process.env.LLM_URL,
                            apiKey: process.env.LLM_KEY, maxRetries: 0,
                            timeout: 120000 });
const model = process.env.LLM_MODEL || 'tiny';
const N = Number(process.env.LLM_N || 400);
const CONC = Number(process.env.LLM_CONC || 8);
const MAX_TOKENS = Number(process.env.LLM_MAX_TOKENS || 1500);

const schemas = {
    person: {
        type: 'object',
        properties: {
            name: { type: 'string', description: 'full name' },
            age: { type: 'integer' },
            role: { enum: ['admin', 'user', 'guest'] },
            tags: { type: 'array', items: { enum: ['a', 'b', 'c', 7] },
                    minItems: 1, maxItems: 3 },
            email: { type: ['string', 'null'] },
        },
        required: ['name', 'age', 'role', 'tags', 'email'],
        additionalProperties: false,
    },
    order: {
        type: 'object',
        properties: {
            order: {
                type: 'object',
                properties: {
                    id: { type: 'integer' },
                    status: { enum: ['new', 'paid', 'shipped'] },
                    lines: {
                        type: 'array', minItems: 1, maxItems: 3,
                        items: {
                            type: 'object',
                            properties: {
                                sku: { enum: ['X1', 'X2', 'Y'] },
                                qty: { type: 'integer' },
                                price: { type: 'number' },
                            },
                            required: ['sku', 'qty', 'price'],
                            additionalProperties: false,
                        },
                    },
                },
                required: ['id', 'status', 'lines'],
                additionalProperties: false,
            },
            paid: { type: 'boolean' },
            note: { anyOf: [{ type: 'null' }, { const: 'rush' }] },
        },
        required: ['order', 'paid', 'note'],
        additionalProperties: false,
    },
    result: {
        type: 'object',
        properties: {
            result: {
                anyOf: [
                    { type: 'object',
                      properties: { ok: { const: true },
                                    value: { type: 'number' } },
                      required: ['ok', 'value'],
                      additionalProperties: false },
                    { type: 'object',
                      properties: { ok: { const: false },
                                    error: { enum: ['timeout', 'denied'] },
                                    retry: { type: ['integer', 'null'] } },
                      required: ['ok', 'error'],
                      additionalProperties: false },
                ],
            },
        },
        required: ['result'],
        additionalProperties: false,
    },
    refs: {
        type: 'object',
        $defs: {
            point: { type: 'object',
                     properties: { x: { type: 'number' },
                                   y: { type: 'number' } },
                     required: ['x', 'y'], additionalProperties: false },
            chain: { type: 'object',
                     properties: { v: { type: 'integer' },
                                   next: { anyOf: [{ $ref: '#/$defs/chain' },
                                                   { type: 'null' }] } },
                     required: ['v', 'next'], additionalProperties: false },
        },
        properties: {
            from: { $ref: '#/$defs/point' },
            to: { $ref: '#/$defs/point' },
            list: { $ref: '#/$defs/chain' },
            flag: { oneOf: [{ type: 'boolean' }, { enum: ['maybe'] }] },
        },
        required: ['from', 'to', 'list', 'flag'],
        additionalProperties: false,
    },
    matrix: {
        type: 'object',
        properties: {
            rows: { type: 'array', minItems: 2, maxItems: 2,
                    items: { type: 'array', minItems: 1, maxItems: 3,
                             items: { type: 'integer' } } },
            label: { type: 'string' },
        },
        required: ['rows'],
        additionalProperties: false,
    },
};

const ajv = new Ajv({ strict: false, allErrors: true });
const validators = {};
for (const [k, s] of Object.entries(schemas)) {
    validators[k] = ajv.compile(s);
}
const anyObject = ajv.compile({ type: 'object' });
const names = Object.keys(schemas);
const temps = [0, 0.3, 0.7, 1.0, 1.5];

let n = 0, failed = 0;
function ok(cond, what) {
    n++;
    if (cond) {
        console.log(`ok ${n} - ${what}`);
    } else {
        failed++;
        console.log(`not ok ${n} - ${what}`);
    }
}

// Close a JSON text cut short (finish_reason length) the simplest way:
// drop a partial escape, literal or number tail, end the open string
// (a key gets ":null"), give a pending value null, close every container.
// What comes out must parse: the engine's text was a valid prefix.  Syntax
// only, independent of the engine's own automaton.
function closePrefix(text) {
    const stack = [];          // '{' or '['
    let inStr = false, isKey = false, esc = 0;
    let expect = 'value';      // value | key | colon | after
    let lastGood = 0;          // text up to here ends a whole token
    for (let i = 0; i < text.length; i++) {
        const c = text[i];
        if (inStr) {
            if (esc === 1) {
                esc = c === 'u' ? 5 : 0;
            } else if (esc > 1) {
                esc = esc === 2 ? 0 : esc - 1;
            } else if (c === '\\') {
                esc = 1;
            } else if (c === '"') {
                inStr = false;
                expect = isKey ? 'colon' : 'after';
                lastGood = i + 1;
            }
            if (inStr && esc === 0) {
                lastGood = i + 1;
            }
            continue;
        }
        if (' \t\n\r'.includes(c)) {
            continue;
        }
        if (c === '"') {
            inStr = true;
            isKey = expect === 'key';
            lastGood = i + 1;
        } else if (c === '{' || c === '[') {
            stack.push(c);
            expect = c === '{' ? 'key' : 'value';
            lastGood = i + 1;
        } else if (c === '}' || c === ']') {
            stack.pop();
            expect = 'after';
            lastGood = i + 1;
        } else if (c === ':') {
            expect = 'value';
            lastGood = i + 1;
        } else if (c === ',') {
            expect = stack[stack.length - 1] === '{' ? 'key' : 'value';
            lastGood = i + 1;
        } else {
            // a number or literal: whole only once followed by a delimiter
            let j = i;
            while (j < text.length && !' \t\n\r,]}'.includes(text[j])) {
                j++;
            }
            if (j < text.length) {
                lastGood = j;
                expect = 'after';
            } else {
                // the cut tail: must be able to start a value here
                const tail = text.slice(i);
                const lit = ['true', 'false', 'null']
                    .some((w) => w.startsWith(tail));
                const num = /^-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][+-]?[0-9]*)?$/
                    .test(tail);
                if (expect !== 'value' || !(lit || num)) {
                    return text;    /* left as is: JSON.parse says why */
                }
            }
            i = j - 1;
        }
    }
    let out = text.slice(0, lastGood);
    if (inStr) {
        out += '"' + (isKey ? ':null' : '');
    } else if (out.length < text.length && expect !== 'after') {
        expect = 'pending';
    }
    out = out.replace(/[\s]+$/, '');
    if (/[:\[]$/.test(out) || (/,$/.test(out) && stack.at(-1) === '[')) {
        out += 'null';
    } else if (/,$/.test(out) || /\{$/.test(out)) {
        out += /,$/.test(out) ? '"":null' : '';
    } else if (/"$/.test(out) && expect === 'colon') {
        out += ':null';
    }
    if (!inStr && stack.length === 0 && out.length === 0) {
        return 'null';
    }
    for (let k = stack.length - 1; k >= 0; k--) {
        out += stack[k] === '{' ? '}' : ']';
    }
    return out;
}

let cutShort = 0;

function check(kind, content, finish, label) {
    let v;
    if (finish === 'length') {
        cutShort++;
        console.log(`# ${label}: cut short by max_tokens after `
                    + `${content.length} chars, ending `
                    + JSON.stringify(content.slice(-60)));
        try {
            JSON.parse(closePrefix(content));
            return null;
        } catch (e) {
            return `${label}: cut short and not a JSON prefix `
                   + `(${e.message}): ${content}`;
        }
    }
    try {
        v = JSON.parse(content);
    } catch (e) {
        return `${label}: not JSON (${e.message}), finish ${finish}: ${content}`;
    }
    const validate = kind === 'json_object' ? anyObject : validators[kind];
    if (!validate(v)) {
        return `${label}: invalid: ${ajv.errorsText(validate.errors)}: ${content}`;
    }
    if (finish !== 'stop') {
        return `${label}: finish_reason ${finish}`;
    }
    return null;
}

async function one(i) {
    const kind = i % 10 === 9 ? 'json_object' : names[i % names.length];
    const temperature = temps[Math.floor(i / names.length) % temps.length];
    const stream = i % 4 === 3;
    const choices = i % 13 === 5 ? 2 : 1;
    const response_format = kind === 'json_object'
        ? { type: 'json_object' }
        : { type: 'json_schema',
            json_schema: { name: kind, schema: schemas[kind], strict: true } };
    const req = {
        model, max_tokens: MAX_TOKENS, temperature, seed: 1000 + i,
        n: choices, response_format,
        messages: [{ role: 'user', content: `Request ${i}: give ${kind}` }],
    };
    if (i % 7 === 2) {
        req.top_p = 0.9;
    }
    if (i % 3 === 1) {
        req.frequency_penalty = 0.5;
    }
    const label = `#${i} ${kind} t=${temperature}${stream ? ' stream' : ''}`
                  + (choices > 1 ? ` n=${choices}` : '');
    const out = [];
    if (stream) {
        const s = await client.chat.completions.create({ ...req,
                                                         stream: true });
        const acc = [];
        for await (const chunk of s) {
            for (const c of chunk.choices) {
                acc[c.index] ??= { content: '', finish: null };
                acc[c.index].content += c.delta?.content ?? '';
                if (c.finish_reason) {
                    acc[c.index].finish = c.finish_reason;
                }
            }
        }
        for (const a of acc) {
            out.push(a);
        }
    } else {
        const r = await client.chat.completions.create(req);
        for (const c of r.choices) {
            out.push({ content: c.message.content, finish: c.finish_reason,
                       tokens: r.usage.completion_tokens });
        }
    }
    const errs = [];
    if (out.length !== choices) {
        errs.push(`${label}: ${out.length} choices`);
    }
    for (const o of out) {
        const e = check(kind, o.content, o.finish, label);
        if (e) {
            errs.push(e);
        }
    }
    return { label, errs, len: out.reduce((a, o) => a + o.content.length, 0) };
}

async function main() {
    // an unsupported keyword is a 400 naming it and its pointer
    try {
        await client.chat.completions.create({
            model, max_tokens: 8,
            messages: [{ role: 'user', content: 'x' }],
            response_format: { type: 'json_schema', json_schema: {
                name: 'zip', schema: { type: 'object', properties: {
                    zip: { type: 'string', pattern: '^[0-9]{5}$' } } } } },
        });
        ok(false, 'pattern: 400');
    } catch (e) {
        ok(e instanceof OpenAI.BadRequestError && e.status === 400,
           `pattern: BadRequestError 400 (${e.status})`);
        ok(e.param === 'response_format', `pattern: param ${e.param}`);
        ok(/unsupported JSON schema keyword 'pattern' at \/properties\/zip/
               .test(e.message), `pattern: message: ${e.message}`);
    }

    // the same when streaming: the error comes before any chunk
    try {
        const s = await client.chat.completions.create({
            model, max_tokens: 8, stream: true,
            messages: [{ role: 'user', content: 'x' }],
            response_format: { type: 'json_schema', json_schema: {
                name: 'm', schema: { type: 'array', minItems: 1,
                                     maxItems: 0 } } },
        });
        for await (const chunk of s) {
            void chunk;
        }
        ok(false, 'stream: 400');
    } catch (e) {
        ok(e instanceof OpenAI.BadRequestError && e.param === 'response_format'
           && /'minItems' is greater than 'maxItems'/.test(e.message),
           `stream: BadRequestError naming minItems (${e.status} ${e.message})`);
    }

    const t0 = Date.now();
    const results = new Array(N);
    let next = 0, bad = 0, chars = 0;
    const errors = [];
    async function worker() {
        while (next < N) {
            const i = next++;
            try {
                results[i] = await one(i);
            } catch (e) {
                results[i] = { label: `#${i}`, errs: [`#${i}: ${e}`], len: 0 };
            }
            chars += results[i].len;
            if (results[i].errs.length) {
                bad++;
                errors.push(...results[i].errs);
            }
        }
    }
    await Promise.all(Array.from({ length: CONC }, worker));
    for (const e of errors.slice(0, 20)) {
        console.log(`# ${e.slice(0, 600)}`);
    }
    ok(bad === 0, `${N} constrained requests: ${N - bad - cutShort} parse, `
       + `validate and stop, ${cutShort} cut short by max_tokens `
       + `(valid prefixes), ${bad} failed, ${chars} chars, `
       + `${((Date.now() - t0) / 1000).toFixed(1)} s`);
    // a random model can loop inside a string until max_tokens: allowed,
    // as a valid prefix, but rarely
    ok(cutShort <= N / 20, `at most 5% cut short by max_tokens (${cutShort})`);
    console.log(`1..${n}`);
    process.exit(failed ? 1 : 0);
}

main().catch((e) => {
    console.log(`not ok - ${e.stack}`);
    process.exit(1);
});
