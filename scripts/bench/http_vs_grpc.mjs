// Concurrent streaming chats over HTTP (OpenAI's Chat Completions, the
// `openai` npm client) against the same over gRPC (GenerateStream with the
// chat rendered in the model's plain format, @grpc/grpc-js), one running
// server, rounds alternating the two. Both clients run in this one Node
// process, so the client side costs the same either way. Every request
// generates exactly MAX_TOKENS tokens (attn_ignore_eos / ignore_eos).
// Prints per round and the medians: aggregate tokens/s (all tokens over the
// round's wall time) and time to first token p50/p95.
//   HTTP_URL=http://127.0.0.1:8000/v1 GRPC=127.0.0.1:50051 PROTO=proto/attn/v1/text_generation.proto \
//   MODEL=aft-decay STREAMS=64 MAX_TOKENS=256 ROUNDS=5 node http_vs_grpc.mjs
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import OpenAI from "openai";
import { performance } from "node:perf_hooks";

const env = process.env;
const STREAMS = Number(env.STREAMS ?? 64);
const MAX_TOKENS = Number(env.MAX_TOKENS ?? 256);
const ROUNDS = Number(env.ROUNDS ?? 5);
const MODEL = env.MODEL ?? "aft-decay";

const definition = protoLoader.loadSync(env.PROTO, {
  keepCase: true, longs: Number, defaults: false, includeDirs: [env.PROTO_ROOT ?? "proto"],
});
const { attn } = grpc.loadPackageDefinition(definition);
const stub = new attn.v1.TextGeneration(env.GRPC, grpc.credentials.createInsecure(), {
  "grpc.max_receive_message_length": 16 << 20,
});
const openai = new OpenAI({ baseURL: env.HTTP_URL, apiKey: "none", maxRetries: 0 });

// A different question per stream, so that the state cache serves none.
const question = (i) => `Tell me about the river number ${i} and the stones beside it.`;

async function httpChat(i) {
  const start = performance.now();
  let first = 0, tokens = 0;
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: question(i) }], max_tokens: MAX_TOKENS,
    temperature: 0.8, seed: i, stream: true, stream_options: { include_usage: true },
    attn_ignore_eos: true,
  });
  for await (const chunk of stream) {
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
    else if (!first && chunk.choices[0]?.delta?.content !== undefined) first = performance.now();
  }
  return { ttft: first - start, tokens };
}

function grpcChat(i) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let first = 0, tokens = 0;
    const call = stub.GenerateStream({
      model: MODEL, prompt: `User: ${question(i)}\nAssistant:`, max_tokens: MAX_TOKENS,
      temperature: 0.8, seed: i, stop: ["\nUser:"], ignore_eos: true,
    });
    call.on("data", (m) => {
      const n = (m.token_ids || []).length;
      // The first text, as over HTTP: text a stop string may still claim
      // is held back on both protocols while its token ids go out.
      if (m.text && !first) first = performance.now();
      tokens += n;
    });
    call.on("error", reject);
    call.on("end", () => resolve({ ttft: first - start, tokens }));
  });
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
const median = (values) => percentile(values, 50);

async function round(protocol) {
  const run = protocol === "http" ? httpChat : grpcChat;
  const start = performance.now();
  const results = await Promise.all(Array.from({ length: STREAMS }, (_, i) => run(i)));
  const seconds = (performance.now() - start) / 1000;
  const tokens = results.reduce((sum, r) => sum + r.tokens, 0);
  if (tokens !== STREAMS * MAX_TOKENS) throw new Error(`${protocol}: ${tokens} tokens`);
  const ttfts = results.map((r) => r.ttft);
  return { tps: tokens / seconds, p50: percentile(ttfts, 50), p95: percentile(ttfts, 95) };
}

await round("grpc");  // warm both paths
await round("http");
const rows = { grpc: [], http: [] };
for (let r = 0; r < ROUNDS; ++r) {
  for (const protocol of r % 2 ? ["http", "grpc"] : ["grpc", "http"]) {
    const result = await round(protocol);
    rows[protocol].push(result);
    console.log(`round ${r + 1} ${protocol}: ${result.tps.toFixed(0)} tokens/s, ` +
                `TTFT p50 ${result.p50.toFixed(0)} ms, p95 ${result.p95.toFixed(0)} ms`);
  }
}
const summary = {};
for (const protocol of ["grpc", "http"]) {
  summary[protocol] = {
    tps: median(rows[protocol].map((x) => x.tps)),
    p50: median(rows[protocol].map((x) => x.p50)),
    p95: median(rows[protocol].map((x) => x.p95)),
  };
}
console.log(`\n| protocol | tokens/s (median of ${ROUNDS}) | TTFT p50 (ms) | TTFT p95 (ms) |`);
console.log("| --- | --- | --- | --- |");
for (const protocol of ["grpc", "http"]) {
  const s = summary[protocol];
  console.log(`| ${protocol} | ${s.tps.toFixed(0)} | ${s.p50.toFixed(0)} | ${s.p95.toFixed(0)} |`);
}
console.log(`\nHTTP/gRPC tokens/s ratio: ${(summary.http.tps / summary.grpc.tps).toFixed(3)}`);
stub.close();
