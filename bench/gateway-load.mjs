// Load side of bench/gateway.sh.
//
//   node gateway-load.mjs latency SOCKET URL N [MAX_TOKENS [PING_URL [PROXY_URL [HOP_SOCKET]]]]
//     N sequential requests to the engine on SOCKET directly (protobuf
//     frames) and N through the gateway at URL (HTTP keep-alive, JSON);
//     prints p50/p99 of each and the difference; with PING_URL also the
//     same POST to a plain nginx "return 200" (the HTTP baseline), and
//     with PROXY_URL to a proxy_pass of that over a Unix socket (what a
//     stock nginx upstream hop costs), and with HOP_SOCKET (the Unix
//     socket of the nginx behind PROXY_URL) the same POST sent there
//     directly on a raw socket, as the engine is: proxy_pass measured the
//     way the gateway is (through nginx minus the backend alone).  The
//     paths take turns request by request.
//   node gateway-load.mjs streams HOST:PORT COUNT RAMP_PER_S PIDS
//     COUNT concurrent SSE streams, opened at RAMP_PER_S; counts the ones
//     that end with data: [DONE]; samples the RSS of the nginx workers
//     PIDS (comma-separated) before and with every stream open.

import net from 'node:net';
import http from 'node:http';
import fs from 'node:fs';

const [mode, ...args] = process.argv.slice(2);

function varint(n) {
  const b = [];
  while (n >= 0x80) { b.push((n & 0x7f) | 0x80); n = Math.floor(n / 128); }
  b.push(n);
  return Buffer.from(b);
}
const fv = (f, v) => Buffer.concat([varint(f << 3), varint(v)]);
const fb = (f, b) => {
  b = Buffer.isBuffer(b) ? b : Buffer.from(b);
  return Buffer.concat([varint((f << 3) | 2), varint(b.length), b]);
};
const frame = (m) => { const h = Buffer.alloc(4); h.writeUInt32BE(m.length); return Buffer.concat([h, m]); };

function pct(a, p) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

// Keep-alive HTTP/1.1 on a raw socket (Unix or TCP): a function that
// sends req and resolves when the whole answer (headers and
// Content-Length bytes) is in.  A connection the server closed (nginx's
// keepalive_requests) is opened again for the next request.
async function rawHttp(path, req) {
  let c = null, buf = Buffer.alloc(0), waiter = null;
  const connect = async () => {
    const s = net.connect(path);
    await new Promise((resolve, reject) => { s.once('connect', resolve); s.once('error', reject); });
    s.setNoDelay(true);
    s.on('error', () => {});
    s.on('close', () => { if (c === s) c = null; });
    s.on('data', (d) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const m = /content-length: *(\d+)/i.exec(buf.subarray(0, end).toString('latin1'));
      const total = end + 4 + (m ? Number(m[1]) : 0);
      if (buf.length < total) return;
      buf = buf.subarray(total);
      if (waiter) { const w = waiter; waiter = null; w(); }
    });
    return s;
  };
  const one = async () => {
    if (c === null) { buf = Buffer.alloc(0); c = await connect(); }
    await new Promise((resolve) => { waiter = resolve; c.write(req); });
  };
  one.close = () => { if (c) c.end(); };
  return one;
}

async function latency(sock, url, n, maxTokens, pingUrl, proxyUrl, hopSock) {
  // the same request every way: one user message, max_tokens, greedy
  const gen = Buffer.concat([fb(1, 'bench'), fb(4, Buffer.concat([fb(1, 'user'), fb(2, 'Hello')])),
    fb(7, fv(1, maxTokens))]);
  const req = frame(fb(1, gen));
  const body = JSON.stringify({ model: 'fake', max_tokens: maxTokens, temperature: 0,
    messages: [{ role: 'user', content: 'Hello' }] });

  // direct: one persistent engine connection, one request at a time
  const c = net.connect(sock);
  await new Promise((resolve, reject) => { c.once('connect', resolve); c.once('error', reject); });
  let buf = Buffer.alloc(0), waiter = null;
  c.on('data', (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    while (buf.length >= 4) {
      const len = buf.readUInt32BE(0);
      if (buf.length < 4 + len) return;
      const kind = buf[4];
      buf = buf.subarray(4 + len);
      if ((kind === 0x2a || kind === 0x32) && waiter) {   /* Done, Error */
        const w = waiter; waiter = null; w();
      }
    }
  });
  const oneDirect = () => new Promise((resolve) => { waiter = resolve; c.write(req); });

  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const oneHttp = (target, check) => new Promise((resolve, reject) => {
    const u = new URL(target);
    const r = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
      agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
    (res) => {
      res.on('data', () => {});
      res.on('end', () => {
        if (check && res.statusCode !== 200) reject(new Error(`${target}: status ${res.statusCode}`));
        else resolve();
      });
    });
    r.on('error', reject);
    r.end(body);
  });

  // The paths take turns request by request, so a change in the
  // machine's load during the run weighs on all of them alike.
  const paths = [['engine direct (socket)', oneDirect], ['through nginx (HTTP)', () => oneHttp(url, true)]];
  if (pingUrl) paths.push(['nginx "return 200" (HTTP)', () => oneHttp(pingUrl, false)]);
  if (proxyUrl) paths.push(['nginx proxy_pass floor', () => oneHttp(proxyUrl, true)]);
  let hop = null;
  if (proxyUrl && hopSock) {
    // what proxy_pass sends the nginx behind it (bench/gateway.sh: /ping)
    hop = await rawHttp(hopSock, `POST /ping HTTP/1.1\r\nHost: hop\r\n`
      + `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    paths.push(['hop nginx direct (socket)', hop]);
  }
  const t = paths.map(() => []);
  for (let i = 0; i < n + 50; i++) {
    for (let k = 0; k < paths.length; k++) {
      const t0 = process.hrtime.bigint();
      await paths[k][1]();
      if (i >= 50) t[k].push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  agent.destroy();
  c.end();
  if (hop) hop.close();

  const row = (name, a) => `${name.padEnd(26)} ${pct(a, 0.5).toFixed(3).padStart(9)} ${pct(a, 0.99).toFixed(3).padStart(9)}`;
  console.log(`${'path'.padEnd(26)} ${'p50 ms'.padStart(9)} ${'p99 ms'.padStart(9)}`);
  paths.forEach((p, k) => console.log(row(p[0], t[k])));
  const diff = (a, b, q) => (pct(a, q) - pct(b, q)).toFixed(3).padStart(9);
  console.log(`${'added by the gateway'.padEnd(26)} ${diff(t[1], t[0], 0.5)} ${diff(t[1], t[0], 0.99)}`);
  if (pingUrl && proxyUrl) {
    console.log(`${'added by proxy_pass'.padEnd(26)} ${diff(t[3], t[2], 0.5)} ${diff(t[3], t[2], 0.99)}`
      + '  (a stock upstream hop: the floor of any nginx upstream module)');
  }
  if (hop) {
    console.log(`${'proxy_pass, as the gateway'.padEnd(26)} ${diff(t[3], t[4], 0.5)} ${diff(t[3], t[4], 0.99)}`
      + '  (through nginx minus its backend direct: what row "added by the gateway" measures)');
  }
}

function rss(pids) {
  let kb = 0;
  for (const p of pids) {
    try {
      const m = fs.readFileSync(`/proc/${p}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
      if (m) kb += Number(m[1]);
    } catch {}
  }
  return kb;
}

async function streams(hostport, count, ramp, pidList) {
  const [host, port] = hostport.split(':');
  const pids = pidList.split(',').filter(Boolean);
  const body = JSON.stringify({ model: 'fake', stream: true, max_tokens: 16,
    messages: [{ role: 'user', content: 'Hello' }] });
  const req = `POST /v1/chat/completions HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n`
    + `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;

  const base = rss(pids);
  let open = 0, started = 0, ok = 0, errors = 0, peak = base, peakOpen = 0;
  const t0 = Date.now();
  const errKinds = {};

  await new Promise((resolve) => {
    let launched = 0;
    const finish = (good, why) => {
      open--;
      if (good) ok++; else { errors++; errKinds[why] = (errKinds[why] ?? 0) + 1; }
      if (ok + errors === count) resolve();
    };
    const one = () => {
      const s = net.connect({ host, port: Number(port) });
      let first = true, tail = '', status = '';
      open++;
      s.setNoDelay(true);
      s.on('connect', () => s.write(req));
      s.on('data', (d) => {
        const t = d.toString('latin1');
        if (first) { status = t.slice(0, 12); first = false; started++; }
        tail = (tail + t).slice(-64);
      });
      s.on('error', (e) => { s.destroy(); finish(false, e.code ?? 'error'); });
      s.on('end', () => {
        const good = status.endsWith('200') && tail.includes('data: [DONE]');
        finish(good, good ? '' : `status ${status.trim()}`);
      });
    };
    const timer = setInterval(() => {
      const n = Math.min(Math.ceil(ramp / 20), count - launched);
      for (let i = 0; i < n; i++) one();
      launched += n;
      if (launched >= count) clearInterval(timer);
    }, 50);
    const sampler = setInterval(() => {
      const now = started - (ok + errors);
      if (now > peakOpen) { peakOpen = now; peak = rss(pids); }
      if (ok + errors === count) clearInterval(sampler);
    }, 100);
  });

  const secs = (Date.now() - t0) / 1000;
  console.log(`streams ${count}, completed with [DONE] ${ok}, errors ${errors} ${JSON.stringify(errKinds)}`);
  console.log(`most open at once ${peakOpen}, wall ${secs.toFixed(1)} s`);
  console.log(`nginx workers RSS: idle ${(base / 1024).toFixed(1)} MiB, with ${peakOpen} open ${(peak / 1024).toFixed(1)} MiB, `
    + `per open stream ${((peak - base) / Math.max(peakOpen, 1)).toFixed(1)} KiB`);
  if (errors) process.exitCode = 1;
}

if (mode === 'latency') {
  await latency(args[0], args[1], Number(args[2] ?? 2000), Number(args[3] ?? 1), args[4], args[5], args[6]);
} else if (mode === 'streams') {
  await streams(args[0], Number(args[1] ?? 10000), Number(args[2] ?? 2000), args[3] ?? '');
} else {
  console.error('usage: gateway-load.mjs latency SOCKET URL N [MAX_TOKENS] | streams HOST:PORT COUNT RAMP PIDS');
  process.exit(2);
}
