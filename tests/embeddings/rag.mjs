// RAG clients against /v1/embeddings, changed only in baseURL and key:
// a current openai SDK (5.x), which asks for base64 unless told otherwise
// and decodes it, and LangChain's OpenAIEmbeddings (embedDocuments in
// batches, embedQuery), which runs on it.  Their vectors must be the
// float32 values the float answer carries, in input order.
//
//   LLM_URL=http://127.0.0.1:PORT/v1 LLM_KEY=sk-... node rag.mjs
//
// Env: LLM_MODEL (embed).  Prints TAP; exits non-zero on any failure.

import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';

const baseURL = process.env.LLM_URL;
const apiKey = process.env.LLM_KEY;
const model = process.env.LLM_MODEL || 'embed';

let n = 0, failed = 0;
function ok(cond, name, extra) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && extra !== undefined) console.log(`# ${JSON.stringify(extra).slice(0, 400)}`);
}
const same = (a, b) => a.length === b.length && a.every((x, k) => Math.fround(x) === Math.fround(b[k]));
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

// what the SDK puts on the wire
const sent = [];
const spy = (url, init) => { sent.push(JSON.parse(init.body)); return fetch(url, init); };
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, fetch: spy });

const docs = ['Paris is the capital of France', 'The quick brown fox',
              'A lazy dog sleeps', 'nginx is a web server', 'x'];

const ref = await client.embeddings.create({ model, input: docs, encoding_format: 'float' });
ok(ref.data.length === 5 && ref.data.every((e) => e.embedding.length === 128), 'float: 5 vectors of 128');

const d = await client.embeddings.create({ model, input: docs });
ok(sent[1].encoding_format === 'base64', 'openai 5: base64 asked for by default', sent[1]);
ok(d.data.every((e) => Array.isArray(e.embedding) && e.embedding.length === 128), 'the SDK decoded the base64');
ok(d.data.every((e, i) => same(e.embedding, ref.data[i].embedding)), 'decoded base64 = float answer, bit for bit');
ok(d.data.every((e) => Math.abs(norm(e.embedding) - 1) < 1e-5), 'unit vectors');
ok(d.usage.prompt_tokens === ref.usage.prompt_tokens && d.usage.total_tokens === d.usage.prompt_tokens,
   'usage', d.usage);

// LangChain: batches of 2 (three requests), then a query
const lc = new OpenAIEmbeddings({ model, apiKey, batchSize: 2, maxRetries: 0,
                                  configuration: { baseURL } });
const vecs = await lc.embedDocuments(docs);
ok(Array.isArray(vecs) && vecs.length === 5, 'embedDocuments: 5 vectors', vecs.length);
ok(vecs.every((v, i) => same(v, ref.data[i].embedding)), 'in batches of 2: the vectors of one request, in order');
const q = await lc.embedQuery('The quick brown fox');
ok(same(q, ref.data[1].embedding), 'embedQuery: the document\'s vector');

// a RAG lookup: the query's nearest document is itself
const cos = vecs.map((v) => v.reduce((s, x, k) => s + x * q[k], 0));
ok(cos.indexOf(Math.max(...cos)) === 1, 'nearest document to the query is itself', cos);

// dimensions refused by a model without truncation: the SDK's error
try {
  await new OpenAIEmbeddings({ model, apiKey, dimensions: 16, maxRetries: 0,
                               configuration: { baseURL } }).embedQuery('x');
  ok(false, 'dimensions 16 refused');
} catch (e) {
  ok(e.status === 400 || /400|dimensions/.test(String(e.message)), 'dimensions 16: a 400 surfaces', String(e.message));
}

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
