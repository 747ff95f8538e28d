// A fast fake token source standing in for llm-engine (benchmarks only):
// answers every Generate request with Started, TOKENS deltas and Done,
// either at once (interval 0) or one delta per INTERVAL ms for all open
// streams on one shared timer; InfoRequest gets a small InfoResponse.
//
//   node bench/gateway-fake.mjs SOCKET [TOKENS] [INTERVAL_MS]
//
// Protobuf is written by hand: the events need only varints and
// length-delimited fields (field numbers from proto/llm.proto).

import net from 'node:net';
import fs from 'node:fs';

const [sock, tokensArg, intervalArg] = process.argv.slice(2);
const TOKENS = Number(tokensArg ?? 16);
const INTERVAL = Number(intervalArg ?? 0);

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

const STARTED = frame(fb(2, fv(1, 12)));
const DELTA = frame(fb(3, fb(2, ' tok')));
const DONE = frame(fb(5, Buffer.concat([fb(1, fv(2, 2)),
  fb(2, Buffer.concat([fv(1, 12), fv(2, TOKENS)])), fb(4, 'fake'), fb(5, 'fp_fake')])));
const INFO = frame(fb(7, Buffer.concat([fb(1, 'fake'), fb(5, 'fake0'), fb(7, 'ready')])));
const BURST = Buffer.concat([STARTED, ...Array(TOKENS).fill(DELTA), DONE]);

const streams = new Set();   // {sock, left}

if (INTERVAL > 0) {
  setInterval(() => {
    for (const s of streams) {
      if (s.sock.destroyed) { streams.delete(s); continue; }
      if (--s.left > 0) {
        s.sock.write(DELTA);
      } else {
        s.sock.write(Buffer.concat([DELTA, DONE]));
        streams.delete(s);
      }
    }
  }, INTERVAL);
}

try { fs.unlinkSync(sock); } catch {}

const server = net.createServer((c) => {
  let buf = Buffer.alloc(0);
  c.on('error', () => {});
  c.on('data', (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    while (buf.length >= 4) {
      const len = buf.readUInt32BE(0);
      if (buf.length < 4 + len) break;
      const kind = buf[4];
      buf = buf.subarray(4 + len);
      if (kind === 0x12) { c.write(INFO); continue; }
      if (INTERVAL > 0) {
        c.write(STARTED);
        streams.add({ sock: c, left: TOKENS });
      } else {
        c.write(BURST);
      }
    }
  });
});
server.maxConnections = 100000;
server.listen({ path: sock, backlog: 4096 }, () => {
  fs.chmodSync(sock, 0o777);
  process.stdout.write('READY\n');
});
