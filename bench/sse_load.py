#!/usr/bin/env python3
"""N concurrent streamed /v1/completions through the gateway (bench/served.sh).

    sse_load.py URL N MAX_TOKENS PROMPT_FILE...

Each client i sends the i-th prompt file's text (round robin), greedy
(or SSE_TEMPERATURE with seed SSE_SEED + i), ignore_eos, stream with
include_usage, all at once; prints one JSON line:
aggregate tok/s (all completion tokens / wall time from the first send to
the last [DONE]), aggregate decode tok/s (the tokens after each stream's
first / the time from the first first token to the last [DONE]), mean
per-stream decode tok/s ((completion_tokens - 1) / (last event - first
token)), TTFT p50 / p95 (from the send), mean prompt tokens, errors.

Python's standard library only (http.client reads chunked SSE lines), so
it runs wherever the benchmark does; a stream's events cost it ~20 us,
well under a decode step.
"""
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse


def one(url, body, out, i, barrier):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    data = json.dumps(body).encode()
    conn.connect()
    barrier.wait()
    t0 = time.perf_counter()
    r = {"t0": t0, "first": None, "last": None, "usage": None, "error": None}
    try:
        conn.request("POST", u.path, body=data,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            r["error"] = "HTTP %d: %s" % (resp.status, resp.read()[:200])
        else:
            while True:
                line = resp.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    r["last"] = time.perf_counter()
                    break
                ev = json.loads(payload)
                if "error" in ev:
                    r["error"] = ev["error"].get("message", "error")
                    break
                if ev.get("choices") and r["first"] is None:
                    r["first"] = time.perf_counter()
                if ev.get("usage"):
                    r["usage"] = ev["usage"]
    except Exception as e:  # reported, not raised: one failed stream
        r["error"] = repr(e)
    conn.close()
    out[i] = r


def main():
    url, n, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    prompts = [open(f).read() for f in sys.argv[4:]]
    out = [None] * n
    barrier = threading.Barrier(n)
    th = []
    temp = float(os.environ.get("SSE_TEMPERATURE", "0"))
    seed = int(os.environ.get("SSE_SEED", "1"))
    for i in range(n):
        body = {"model": "bench", "prompt": prompts[i % len(prompts)],
                "max_tokens": gen, "temperature": temp, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        if temp > 0:
            body["seed"] = seed + i
        t = threading.Thread(target=one, args=(url, body, out, i, barrier))
        t.start()
        th.append(t)
    for t in th:
        t.join()
    ok = [r for r in out if r["error"] is None and r["usage"]
          and r["first"] is not None and r["last"] is not None]
    errors = [r["error"] or "no usage" for r in out if r not in ok]
    if not ok:
        print(json.dumps({"errors": len(errors), "first_error": errors[0]}))
        return 1
    t_send = min(r["t0"] for r in ok)
    t_first = min(r["first"] for r in ok)
    t_end = max(r["last"] for r in ok)
    comp = sum(r["usage"]["completion_tokens"] for r in ok)
    ttft = sorted((r["first"] - r["t0"]) * 1e3 for r in ok)
    per = [(r["usage"]["completion_tokens"] - 1) / (r["last"] - r["first"])
           for r in ok if r["last"] > r["first"]]
    res = {
        "clients": n,
        "errors": len(errors),
        "prompt_tokens_mean": statistics.mean(
            r["usage"]["prompt_tokens"] for r in ok),
        "completion_tokens": comp,
        "agg_tok_s": comp / (t_end - t_send),
        "agg_decode_tok_s": (comp - len(ok)) / (t_end - t_first),
        "stream_decode_tok_s": statistics.mean(per) if per else 0.0,
        "ttft_p50_ms": ttft[len(ttft) // 2] if len(ttft) % 2
        else (ttft[len(ttft) // 2 - 1] + ttft[len(ttft) // 2]) / 2,
        "ttft_p95_ms": ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))],
    }
    if errors:
        res["first_error"] = errors[0]
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
