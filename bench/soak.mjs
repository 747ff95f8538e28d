// Load and report sides of bench/soak.sh.  Core Node only.
//
//   node soak.mjs load URL KEY DURATION_S CLIENTS WARMUP_S OUT WARM_FILE
//     CLIENTS concurrent clients send the mix below to URL (the gateway)
//     for DURATION_S seconds; each request carries x-soak-id, logged by
//     nginx, so every request is matched with its access-log line.  One
//     JSON line per request in OUT; WARM_FILE is created after WARMUP_S.
//   node soak.mjs report DIR
//     reads DIR/{clients.jsonl, access.log, metrics.txt, settings.json,
//     stats-*.json, rss.txt, times.txt}, prints the reconciliation table,
//     exits 1 when it does not reconcile (see docs/BENCHMARKS.md, Soak).

import http from 'node:http';
import fs from 'node:fs';

// The mix: kind, weight (percent).
export const MIX = [
  ['chat', 25],            // non-streaming chat, model tiny
  ['chat_tools', 15],      // non-streaming chat with tools, model tiny
  ['stream_usage', 20],    // stream, stream_options.include_usage, model tiny
  ['completions', 15],     // /v1/completions, non-streaming (1 in 3 streamed)
  ['stream_cancel', 10],   // stream closed by the client after 1-8 chunks
  ['fallback_model', 10],  // non-streaming chat to tiny-b (engine b)
  ['gone_fallback', 5],    // model "gone" (no engine) falls back to tiny-b
];

const WORDS = ('the a of to and in is it you that he was for on are with as ' +
  'his they be at one have this from or had by hot word but what some we can ' +
  'out other were all there when up use your how said an each she which do ' +
  'their time if will way about many then them write would like so these her ' +
  'long make thing see him two has look more day could go come did number ' +
  'sound no most people my over know water than call first who may down side').split(' ');

let seed = 12345;
function rnd() {      // xorshift32, reproducible mix
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const rint = (a, b) => a + Math.floor(rnd() * (b - a + 1));
const words = (n) => Array.from({ length: n }, () => WORDS[rint(0, WORDS.length - 1)]).join(' ');

function pickKind() {
  let x = rnd() * 100;
  for (const [k, w] of MIX) { if ((x -= w) < 0) return k; }
  return MIX[0][0];
}

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

function buildRequest(kind) {
  const msgs = [{ role: 'user', content: words(rint(3, 60)) }];
  if (rnd() < 0.3) msgs.unshift({ role: 'system', content: words(rint(5, 20)) });
  switch (kind) {
    case 'chat':
      return { path: '/v1/chat/completions', stream: false,
        body: { model: 'tiny', messages: msgs, max_tokens: rint(1, 48), temperature: 0.8 } };
    case 'chat_tools':
      return { path: '/v1/chat/completions', stream: false,
        body: { model: 'tiny', messages: msgs, tools: TOOLS, tool_choice: 'auto',
          max_tokens: rint(1, 48), temperature: 0.8 } };
    case 'stream_usage':
      return { path: '/v1/chat/completions', stream: true,
        body: { model: 'tiny', messages: msgs, max_tokens: rint(1, 96), temperature: 0.8,
          stream: true, stream_options: { include_usage: true } } };
    case 'completions': {
      const s = rnd() < 1 / 3;
      const b = { model: 'tiny', prompt: words(rint(3, 60)), max_tokens: rint(1, 48), temperature: 0.8 };
      if (s) { b.stream = true; b.stream_options = { include_usage: true }; }
      return { path: '/v1/completions', stream: s, body: b };
    }
    case 'stream_cancel':
      return { path: '/v1/chat/completions', stream: true, cancelAfter: rint(1, 8),
        body: { model: 'tiny', messages: msgs, max_tokens: 1500, ignore_eos: true,
          temperature: 0.8, stream: true, stream_options: { include_usage: true } } };
    case 'fallback_model':
      return { path: '/v1/chat/completions', stream: false,
        body: { model: 'tiny-b', messages: msgs, max_tokens: rint(1, 48), temperature: 0.8 } };
    case 'gone_fallback':
      return { path: '/v1/chat/completions', stream: false,
        body: { model: 'gone', messages: msgs, max_tokens: rint(1, 48), temperature: 0.8 } };
  }
  throw new Error(kind);
}

// One request; resolves with its record, never rejects.
function send(url, key, agent, id, kind, rq) {
  return new Promise((resolve) => {
    const u = new URL(url);
    const body = JSON.stringify(rq.body);
    const rec = { id, kind, model: rq.body.model, max_tokens: rq.body.max_tokens, status: 0, prompt: null, completion: null,
      done: false, error: null, cancelled: false, chunks: 0, t0: Date.now(), t1: 0 };
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      rec.t1 = Date.now();
      resolve(rec);
    };
    const req = http.request({
      host: u.hostname, port: u.port, path: rq.path, method: 'POST',
      agent: rq.cancelAfter ? false : agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body),
        authorization: `Bearer ${key}`, 'x-soak-id': id },
    }, (res) => {
      rec.status = res.statusCode;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        text += d;
        if (!rq.stream || res.statusCode !== 200) return;
        let i;
        while ((i = text.indexOf('\n\n')) >= 0) {
          const ev = text.slice(0, i);
          text = text.slice(i + 2);
          for (const line of ev.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const data = line.slice(6);
            if (data === '[DONE]') { rec.done = true; continue; }
            let j;
            try { j = JSON.parse(data); } catch { rec.error = 'bad_json'; continue; }
            if (j.error) rec.error = j.error.code || j.error.type || 'error';
            if (j.usage) { rec.prompt = j.usage.prompt_tokens; rec.completion = j.usage.completion_tokens; }
            if (j.choices && j.choices.length) rec.chunks++;
          }
          if (rq.cancelAfter && rec.chunks >= rq.cancelAfter && !rec.done && rec.prompt === null) {
            rec.cancelled = true;
            res.destroy();
            req.destroy();
            finish();
            return;
          }
        }
      });
      res.on('end', () => {
        if (!rq.stream || res.statusCode !== 200) {
          try {
            const j = JSON.parse(text);
            if (j.usage) { rec.prompt = j.usage.prompt_tokens; rec.completion = j.usage.completion_tokens; }
            if (j.error) rec.error = j.error.code || j.error.type || 'error';
          } catch { rec.error = 'bad_json'; }
        }
        finish();
      });
      res.on('error', () => { if (!rec.cancelled) rec.error = rec.error || 'reset'; finish(); });
      res.on('close', finish);
    });
    req.on('error', (e) => { if (!rec.cancelled) rec.error = rec.error || `socket:${e.code}`; finish(); });
    req.end(body);
  });
}

async function load(url, key, duration, clients, warmup, out, warmFile) {
  const fd = fs.openSync(out, 'w');
  const t0 = Date.now();
  const end = t0 + duration * 1000;
  setTimeout(() => fs.writeFileSync(warmFile, `${Date.now()}\n`), warmup * 1000);
  const one = async (c) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    for (let n = 0; Date.now() < end; n++) {
      const kind = pickKind();
      const rec = await send(url, key, agent, `c${c}-${n}`, kind, buildRequest(kind));
      fs.writeSync(fd, JSON.stringify(rec) + '\n');
    }
    agent.destroy();
  };
  await Promise.all(Array.from({ length: clients }, (_, c) => one(c)));
  fs.closeSync(fd);
}


// The report.

function parseMetrics(text) {
  const s = {};
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    (s[m[1]] ||= []).push({ labels, v: Number(m[3]) });
  }
  return s;
}
const msum = (s, name, f = () => true) => (s[name] || []).filter((x) => f(x.labels)).reduce((a, x) => a + x.v, 0);

// $msec $request_time $status $http_x_soak_id $llm_model $llm_prompt_tokens
// $llm_completion_tokens $llm_finish_reason $llm_error_code "$upstream_addr"
function parseLog(text) {
  const r = [];
  for (const line of text.split('\n')) {
    const m = /^(\S+) (\S+) (\d+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) "(.*)"$/.exec(line);
    if (!m) { if (line) r.push({ bad: line }); continue; }
    const num = (x) => (x === '-' ? 0 : Number(x));
    const ups = m[10] === '-' ? [] : m[10].split(/, | : /);
    r.push({ end: Number(m[1]) * 1000, start: (Number(m[1]) - Number(m[2])) * 1000,
      status: Number(m[3]), id: m[4], model: m[5], prompt: num(m[6]), completion: num(m[7]),
      finish: m[8], error: m[9], ups, last: ups.length ? ups[ups.length - 1] : '-' });
  }
  return r;
}

function report(dir) {
  const rd = (f) => fs.readFileSync(`${dir}/${f}`, 'utf8');
  const kv = (f) => Object.fromEntries(rd(f).trim().split('\n').map((l) => l.split(' '))
    .map(([k, v]) => [k, Number(v)]));
  const st = JSON.parse(rd('settings.json'));
  const times = kv('times.txt');
  const rss = kv('rss.txt');
  const FIELDS = ['requests_total', 'requests_cancelled', 'prompt_tokens_total', 'completion_tokens_total'];
  const stats = (f, base) => {
    const j = JSON.parse(rd(f)), b0 = base ? JSON.parse(rd(base)) : {};
    return Object.fromEntries(FIELDS.map((k) => [k, j[k] - (b0[k] || 0)]));
  };
  // the engines' counters less their direct warm-up (before the load)
  const aOld = stats('stats-a-old.json', 'stats-a-base.json');
  const aNew = stats('stats-a-new.json');
  const b = stats('stats-b.json', 'stats-b-base.json');
  const cl = rd('clients.jsonl').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const logAll = parseLog(rd('access.log'));
  const badLines = logAll.filter((x) => x.bad);
  const log = logAll.filter((x) => !x.bad);
  const met = parseMetrics(rd('metrics.txt'));
  const sockA = `unix:${st.sockA}`, sockB = `unix:${st.sockB}`;

  const fails = [];
  const check = (ok, what) => { if (!ok) fails.push(what); return ok ? 'ok' : 'MISMATCH'; };
  const sum = (a, f) => a.reduce((s, x) => s + f(x), 0);
  const P = (x) => x.prompt, C = (x) => x.completion;
  const pad = (x, n) => String(x).padStart(n);
  const row = (label, cols, verdict = '') =>
    console.log(label.padEnd(40) + cols.map((c) => pad(c, 12)).join('') + (verdict ? `  ${verdict}` : ''));

  // clients and log lines matched by x-soak-id
  const byId = new Map(log.map((x) => [x.id, x]));
  const clById = new Map(cl.map((c) => [c.id, c]));
  const unmatched = cl.filter((c) => !byId.has(c.id));
  const extraLog = log.filter((x) => !clById.has(x.id));

  // Where each logged request was answered.  The killed engine's
  // requests: engine a in their upstreams, started before the kill.  Of
  // those, the ones still going at the snapshot of its counters (ended at
  // or after it) are "in flight": the engine's count for them died with it.
  const onA = (x) => x.ups.includes(sockA);
  const aOldAll = log.filter((x) => onA(x) && x.start < times.kill);
  const inflight = aOldAll.filter((x) => x.end >= times.snap);
  const inflightIds = new Set(inflight.map((x) => x.id));
  const aOldDone = aOldAll.filter((x) => x.end < times.snap);
  const aNewLog = log.filter((x) => x.last === sockA && x.start >= times.restart);
  const bLog = log.filter((x) => x.last === sockB);
  const noEngine = log.filter((x) => x.last !== sockA && x.last !== sockB);
  const unclassified = log.filter((x) => x.last === sockA && !aOldAll.includes(x) && !aNewLog.includes(x));

  const failed = log.filter((x) => x.status >= 500 || x.finish === 'error');
  const expected = failed.filter((x) => inflightIds.has(x.id));
  const unexpected = failed.filter((x) => !inflightIds.has(x.id));
  const clErr = cl.filter((c) => (c.status >= 500 || c.error || c.status === 0) && !c.cancelled);
  const clErrUnexpected = clErr.filter((c) => !inflightIds.has(c.id));

  const mReq = msum(met, 'llm_requests_total');
  const mP = msum(met, 'llm_tokens_total', (l) => l.kind === 'prompt');
  const mC = msum(met, 'llm_tokens_total', (l) => l.kind === 'completion');
  const e = Object.fromEntries(FIELDS.map((k) => [k, aOld[k] + aNew[k] + b[k]]));
  const usage = cl.filter((c) => c.prompt !== null && byId.has(c.id));
  const usageDiff = usage.filter((c) => byId.get(c.id).prompt !== c.prompt
    || byId.get(c.id).completion !== c.completion);
  const isCan = (x) => x.finish === 'cancelled';
  const fb = log.filter((x) => clById.has(x.id) && x.model !== clById.get(x.id).model);

  const counts = {};
  for (const c of cl) counts[c.kind] = (counts[c.kind] || 0) + 1;
  const dur = (Math.max(...cl.map((c) => c.t1)) - Math.min(...cl.map((c) => c.t0))) / 1000;

  console.log(`# Soak, ${st.date}: DURATION=${st.duration}s CLIENTS=${st.clients} WARMUP=${st.warmup}s;`
    + ` engine a killed (SIGKILL) at ${((times.kill - times.t0) / 1000).toFixed(1)}s`
    + ` (${times.kill - times.snap} ms after its counters were read), restarted on the same socket,`
    + ` serving again ${((times.ready - times.kill) / 1000).toFixed(1)}s later; nginx not restarted`);
  console.log(`# nginx ${st.nginx}, 2 workers, keys file (1 key) + zone, llm_metrics, access log with $llm_*;`
    + ` 2 x llm-engine ${st.model} --threads 1: a serves tiny (fallback=tiny-b), b serves tiny-b;`
    + ` model gone: stale socket, fallback=tiny-b`);
  console.log(`# mix (% of requests): ${MIX.map(([k, w]) => `${k} ${w}`).join(', ')}`);
  console.log(`# sent: ${cl.length} requests in ${dur.toFixed(0)}s (${(cl.length / dur).toFixed(0)}/s): `
    + MIX.map(([k]) => `${k} ${counts[k] || 0}`).join(', '));
  console.log(`# machine: ${st.cores} cores, load average at start ${st.load0}, at end ${st.load1}`);
  console.log('');

  row('totals', ['clients', 'access log', '/metrics', 'engines']);
  row('  requests', [cl.length, log.length, mReq, e.requests_total],
    check(cl.length === log.length && log.length === mReq && !unmatched.length && !extraLog.length,
      'requests: clients == access log == /metrics'));
  const statuses = [...new Set([...log.map((x) => x.status), ...cl.map((c) => c.status)])].sort();
  for (const s of statuses) {
    const nc = cl.filter((c) => c.status === s).length, nl = log.filter((x) => x.status === s).length;
    const nm = msum(met, 'llm_requests_total', (l) => Number(l.status) === s);
    row(`    status ${s}`, [nc, nl, nm, ''], s === 0 ? '(no response)'
      : check(nc === nl && nl === nm, `status ${s}: clients == access log == /metrics`));
  }
  const nCan = cl.filter((c) => c.cancelled).length, lCan = log.filter(isCan).length;
  row('  cancelled by the client', [nCan, lCan, '', e.requests_cancelled],
    check(nCan === lCan, 'cancelled: clients == access log'));
  row('  answered by a fallback model', ['', fb.length, msum(met, 'llm_fallbacks_total'), ''],
    check(fb.length === msum(met, 'llm_fallbacks_total'), 'fallbacks: access log == /metrics'));
  row('  prompt tokens', ['', sum(log, P), mP, e.prompt_tokens_total],
    check(sum(log, P) === mP, 'prompt: access log == /metrics'));
  row('  completion tokens', ['', sum(log, C), mC, e.completion_tokens_total],
    check(sum(log, C) === mC, 'completion: access log == /metrics'));
  row(`  requests with usage seen (${usage.length})`, ['', '', '', '']);
  row('    prompt tokens', [sum(usage, P), sum(usage, (c) => byId.get(c.id).prompt), '', ''],
    check(!usageDiff.length, 'usage: clients == access log'));
  row('    completion tokens', [sum(usage, C), sum(usage, (c) => byId.get(c.id).completion), '', ''],
    check(!usageDiff.length, 'usage: clients == access log'));
  console.log('');

  row('by engine', ['requests', 'cancelled', 'prompt', 'completion']);
  const part = (label, logPart, eng, reqs) => {
    const l = [reqs ?? logPart.length, logPart.filter(isCan).length, sum(logPart, P), sum(logPart, C)];
    row(`  ${label}: access log`, l);
    const en = FIELDS.map((k) => eng[k]);
    row(`  ${label}: engine`, en, check(l.every((v, i) => v === en[i]), `${label}: access log == engine`));
    return l;
  };
  part('b', bLog, b, log.filter((x) => x.ups.includes(sockB)).length);
  part('a restarted', aNewLog, aNew);
  // engine a before the kill: its counters at the snapshot less what the
  // log says of the requests that had ended by then is what it counted of
  // the requests in flight; that must be >= 0 and within what they asked
  const lDone = [aOldDone.length, aOldDone.filter(isCan).length, sum(aOldDone, P), sum(aOldDone, C)];
  row('  a killed, ended before snapshot: log', lDone);
  const en = FIELDS.map((k) => aOld[k]);
  row('  a killed: engine at snapshot', en);
  const diff = en.map((v, i) => v - lDone[i]);
  const inA = inflight.filter((x) => x.last === sockA);
  const bound = [inflight.length, inflight.length,
    sum(inflight, (x) => x.prompt || 2048),
    sum(inflight, (x) => (x.last === sockA ? clById.get(x.id)?.max_tokens ?? 2048 : 0))];
  row(`  a killed, in flight (${inflight.length}): engine`, diff,
    check(diff.every((v, i) => v >= 0 && v <= bound[i]), 'engine a (killed): more than its in-flight requests'));
  row(`  a killed, in flight: access log`, [inflight.length, inflight.filter(isCan).length,
    sum(inA, P), sum(inA, C)], '(not comparable: the engine died)');
  console.log('');

  const billed = sum(log, C), generated = e.completion_tokens_total;
  console.log(`completion tokens billed ${billed}, generated ${generated} (engines):`
    + ` ${billed - generated >= 0 ? '+' : ''}${billed - generated}, all of it on the ${inflight.length} requests`
    + ` in flight on the killed engine (billed ${sum(inA, C)} there, the engine had counted ${diff[3]} of them`
    + ' by its last snapshot); everything else exact');
  check(!unclassified.length, 'requests on engine a neither before the kill nor after the restart');
  const outcome = {};
  for (const x of inflight) {
    const k = `${x.status} ${x.finish}${x.last === sockB ? ' (failed over to b)' : ''}`;
    outcome[k] = (outcome[k] || 0) + 1;
  }
  console.log(`in flight on engine a at the snapshot/kill: ${inflight.length}: `
    + Object.entries(outcome).map(([k, v]) => `${v} ${k}`).join(', '));
  console.log(`5xx or error finish: ${failed.length} (expected, in flight on the killed engine: ${expected.length};`
    + ` unexpected: ${unexpected.length}); clients saw ${clErr.length} errors (unexpected ${clErrUnexpected.length})`);
  check(!unexpected.length && !clErrUnexpected.length, 'unexpected 5xx or errors');
  // tokens billed on a 5xx that tried more than one engine came from an
  // attempt before the last: the request was tried again after the
  // engine had produced tokens, which docs/GATEWAY.md rules out
  const retried = log.filter((x) => x.ups.length >= 2 && x.status >= 500 && x.completion > 0);
  console.log(`tried again after tokens were produced (5xx, several attempts, tokens billed): ${retried.length}`
    + (retried.length ? ` (${retried.map((x) => `${x.id}: ${x.completion} tokens, ${x.ups.length} attempts`).join('; ')};`
      + ' a defect, reproduced by t/soak_retry_cached.t)' : ''));
  check(!retried.length, 'requests tried again after tokens were produced');
  console.log(`cancelled by the client: ${lCan} requests, billed ${sum(log.filter(isCan), C)} completion tokens`);
  if (noEngine.length) console.log(`requests that reached no engine: ${noEngine.length}`);
  if (usageDiff.length) console.log(`client usage != access log: ${usageDiff.length}, e.g. ${usageDiff.slice(0, 3).map((c) => c.id).join(' ')}`);
  if (unmatched.length) console.log(`client requests without a log line: ${unmatched.slice(0, 5).map((c) => c.id).join(' ')}`);
  if (unclassified.length) console.log(`unclassified requests on a: ${unclassified.length}`);
  if (badLines.length) { console.log(`unparsed log lines: ${badLines.length}: ${badLines[0].bad}`); check(false, 'log lines'); }
  for (const x of unexpected.slice(0, 5)) console.log(`  unexpected: ${JSON.stringify(x)}`);
  console.log('');

  row('RSS (kB)', ['start', 'kill', 'end', 'drift']);
  for (const [name, k0, kk, k1] of [['nginx workers (sum of 2)', 'nginx0', 'nginxkill', 'nginx1'],
    ['engine a (end: the restarted one)', 'a0', 'akill', 'a1'], ['engine b', 'b0', 'bkill', 'b1']]) {
    const d = (rss[k1] - rss[k0]) / rss[k0] * 100;
    row(`  ${name}`, [rss[k0], rss[kk], rss[k1], `${d >= 0 ? '+' : ''}${d.toFixed(1)}%`],
      check(d <= 5, `RSS of ${name} grew more than 5%`));
  }
  console.log(`  (start: after the warm-up; the restarted engine a had ${rss.anew0} kB ${st.warmup}s after its start)`);
  console.log('');
  if (fails.length) {
    console.log(`NOT RECONCILED: ${[...new Set(fails)].join('; ')}`);
    return 1;
  }
  console.log('RECONCILED: every check above holds');
  return 0;
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'load') {
  await load(args[0], args[1], Number(args[2]), Number(args[3]), Number(args[4]), args[5], args[6]);
} else if (mode === 'report') {
  process.exitCode = report(args[0]);
} else {
  console.error('usage: soak.mjs load URL KEY DURATION CLIENTS WARMUP OUT WARM_FILE | report DIR');
  process.exitCode = 2;
}
