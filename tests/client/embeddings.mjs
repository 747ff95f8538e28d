// /v1/embeddings with the official openai client's embeddings.create, as
// RAG code calls it, with only baseURL and apiKey changed.  The pinned
// client (4.77) sends no encoding_format by default (float); newer ones
// ask for base64 and decode it: both forms are checked to agree bit for
// bit (as float32), vectors must be unit length, and a 400 must surface as
// the SDK's BadRequestError with the param.  The response is also validated with ajv against the
// official CreateEmbeddingResponse schema (tests/schemas).
//
//   LLM_URL=http://127.0.0.1:PORT/v1 LLM_KEY=sk-... node embeddings.mjs
//
// Env: LLM_MODEL (embed).  Prints TAP; exits non-zero on any failure.

import OpenAI from 'openai';
import Ajv from 'ajv';
import { readFileSync } from 'node:fs';

const client = new OpenAI({ baseURL: process.env.LLM_URL, apiKey: process.env.LLM_KEY,
                            maxRetries: 0, timeout: 60000 });
const model = process.env.LLM_MODEL || 'embed';
const spec = JSON.parse(readFileSync(new URL('../schemas/openai-embeddings.json', import.meta.url)));

let n = 0, failed = 0;
function ok(cond, name, extra) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && extra !== undefined) console.log(`# ${JSON.stringify(extra).slice(0, 400)}`);
}
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

// ajv over the spec's components: $ref "#/components/schemas/X" resolve
// inside the one document
const ajv = new Ajv({ strict: false, validateFormats: false });  // format float: a number
ajv.addSchema(spec, 'spec');
const validate = ajv.getSchema('spec#/components/schemas/CreateEmbeddingResponse');

const texts = ['The quick brown fox', 'A lazy dog sleeps', 'x'];

// the SDK's default
const d = await client.embeddings.create({ model, input: texts });
ok(d.object === 'list' && d.data.length === 3, 'default: a list of 3', d);
ok(d.data.every((e, i) => e.index === i && e.object === 'embedding'), 'indexes in order');
ok(d.data.every((e) => Array.isArray(e.embedding) && e.embedding.length === 128),
   '128 floats each');
ok(d.data.every((e) => Math.abs(norm(e.embedding) - 1) < 1e-5), 'unit vectors');
ok(d.usage.prompt_tokens > 0 && d.usage.total_tokens === d.usage.prompt_tokens, 'usage', d.usage);
ok(d.model === model, 'model');

// float: the same numbers
const f = await client.embeddings.create({ model, input: texts, encoding_format: 'float' });
ok(validate(f), 'float answer validates against CreateEmbeddingResponse (ajv)', validate.errors);
ok(f.data.every((e, i) => e.embedding.every((x, k) => Math.fround(x) === Math.fround(d.data[i].embedding[k]))),
   'encoding_format float: the same float32 values');

// base64 asked for explicitly: the SDK leaves the string
const b = await client.embeddings.create({ model, input: 'x', encoding_format: 'base64' });
const raw = Buffer.from(b.data[0].embedding, 'base64');
ok(typeof b.data[0].embedding === 'string' && raw.length === 128 * 4, 'explicit base64: the string');
ok([...Array(128).keys()].every((k) => raw.readFloatLE(4 * k) === Math.fround(d.data[2].embedding[k])),
   'its little-endian float32 are the float vector of "x", bit for bit');

// the base64 decoding newer SDKs do by default (openai >= 4.78)
const fromB64 = Array.from(new Float32Array(raw.buffer, raw.byteOffset, raw.length / 4));
ok(Math.abs(norm(fromB64) - 1) < 1e-5, 'decoded base64: a unit vector');

// token ids
const t = await client.embeddings.create({ model, input: [[1, 2, 3], [4, 5]] });
ok(t.data.length === 2 && t.usage.prompt_tokens === 5, 'token-id lists: 2 vectors, 5 tokens', t.usage);

// a 400 is the SDK's BadRequestError
try {
  await client.embeddings.create({ model, input: '' });
  ok(false, 'empty input refused');
} catch (e) {
  ok(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'input',
     'empty input: BadRequestError, param input', { status: e.status, param: e.param, msg: e.message });
}
try {
  await client.embeddings.create({ model, input: 'x', dimensions: 16 });
  ok(false, 'dimensions refused');
} catch (e) {
  ok(e instanceof OpenAI.BadRequestError && e.param === 'dimensions',
     'dimensions without truncation: BadRequestError, param dimensions', { param: e.param });
}

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
