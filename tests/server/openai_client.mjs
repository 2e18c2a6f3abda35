// The official `openai` npm client against a real attn-server: models,
// completions, chat, streaming, logprobs, n > 1, seeds, API keys, the
// per-key limit, the client-held state extension, and errors (status and
// error.param). Run by tests/server/openai_clients.sh.
//   BASE_URL=http://127.0.0.1:PORT/v1 KEY=... OTHER_KEY=... MODEL=... node openai_client.mjs
import assert from "node:assert/strict";
import OpenAI from "openai";

const { BASE_URL, KEY, OTHER_KEY, MODEL, OTHER_MODEL, PER_KEY_LIMIT } = process.env;
const client = new OpenAI({ baseURL: BASE_URL, apiKey: KEY, maxRetries: 0 });
const other = new OpenAI({ baseURL: BASE_URL, apiKey: OTHER_KEY, maxRetries: 0 });
const prompt = "the river keeps its small state";
const messages = [
  { role: "system", content: "answer in a few words" },
  { role: "user", content: prompt },
];

const checks = [];
function check(name, body) {
  checks.push({ name, body });
}

// The error an awaited call throws, for its status and error object.
async function refusal(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("the call was not refused");
}

check("models list and retrieve", async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id).sort();
  assert.deepEqual(ids, [MODEL, OTHER_MODEL].sort());
  const one = await client.models.retrieve(OTHER_MODEL);
  assert.equal(one.id, OTHER_MODEL);
  assert.equal(one.object, "model");
  assert.ok(one.attn.state_bytes_per_sequence > 0);
  assert.ok(typeof one.attn.mixer === "string");
});

check("completion with logprobs", async () => {
  const r = await client.completions.create({
    model: MODEL, prompt, max_tokens: 6, temperature: 0, logprobs: 2,
  });
  assert.equal(r.object, "text_completion");
  assert.ok(r.id.startsWith("cmpl-"));
  const choice = r.choices[0];
  assert.ok(["length", "stop"].includes(choice.finish_reason));
  assert.equal(choice.logprobs.tokens.length, r.usage.completion_tokens);
  assert.equal(choice.logprobs.tokens.join(""), choice.text);
  for (let i = 0; i < choice.logprobs.tokens.length; ++i) {
    assert.ok(choice.logprobs.token_logprobs[i] <= 0);
    const alternatives = Object.values(choice.logprobs.top_logprobs[i]);
    assert.ok(alternatives.length >= 1 && alternatives.length <= 2);
    // Greedy: the chosen token is the most likely.
    assert.ok(Math.abs(Math.max(...alternatives) - choice.logprobs.token_logprobs[i]) < 1e-6);
  }
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  // Token ids as the prompt give the same greedy text.
  const ids = await client.completions.create({
    model: MODEL, prompt: [5, 6, 7], max_tokens: 3, temperature: 0,
  });
  assert.equal(ids.usage.prompt_tokens, 3);
});

check("chat, whole and streamed, agree", async () => {
  const whole = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  assert.equal(whole.object, "chat.completion");
  const message = whole.choices[0].message;
  assert.equal(message.role, "assistant");
  const content = whole.choices[0].logprobs.content;
  assert.equal(content.length, whole.usage.completion_tokens);
  assert.ok(content.every((t) => t.top_logprobs.length === 3 && Array.isArray(t.bytes)));

  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", roles = 0, finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, "chat.completion.chunk");
    assert.equal(chunk.id, chunks === 1 ? chunk.id : chunk.id);
    if (chunk.usage) {
      usage = chunk.usage;
      assert.equal(chunk.choices.length, 0);
      continue;
    }
    const delta = chunk.choices[0].delta;
    if (delta.role) ++roles;
    text += delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, message.content);
  assert.equal(roles, 1);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.ok(chunks >= 2);
});

check("n > 1 and seeds", async () => {
  const ask = () => client.chat.completions.create({
    model: MODEL, messages, max_tokens: 10, n: 3, seed: 1234, temperature: 1.0,
  });
  const [a, b] = [await ask(), await ask()];
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  const c = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 10, n: 1, seed: 99, temperature: 1.0,
  });
  assert.equal(c.choices.length, 1);
  // Streamed choices arrive interleaved, each with its own index.
  const stream = await client.completions.create({
    model: MODEL, prompt, max_tokens: 5, n: 2, seed: 1234, temperature: 1.0, stream: true,
  });
  const texts = ["", ""];
  for await (const chunk of stream) texts[chunk.choices[0].index] += chunk.choices[0].text;
  const same = await client.completions.create({
    model: MODEL, prompt, max_tokens: 5, n: 2, seed: 1234, temperature: 1.0,
  });
  assert.deepEqual(texts, same.choices.map((x) => x.text));
});

check("the state cache shows in usage", async () => {
  const long = { model: OTHER_MODEL, prompt: prompt.repeat(20), max_tokens: 2, temperature: 0 };
  await client.completions.create(long);
  const again = await client.completions.create(long);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
});

check("client-held state continues a chat", async () => {
  const first = await client.chat.completions.create({
    model: OTHER_MODEL, messages, max_tokens: 6, temperature: 0, attn_return_state: true,
  });
  const state = first.choices[0].attn_state;
  assert.ok(state && state.data.length > 0 && state.tokens > 0);
  const next = await client.chat.completions.create({
    model: OTHER_MODEL, messages: [{ role: "user", content: "and then?" }], max_tokens: 4,
    temperature: 0, attn_state: state,
  });
  assert.equal(next.usage.prompt_tokens_details.cached_tokens, state.tokens);
  assert.ok(next.usage.prompt_tokens < first.usage.prompt_tokens + state.tokens);
});

check("errors carry status, type and param", async () => {
  let e = await refusal(client.chat.completions.create({ model: MODEL, messages, temperature: 7 }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "temperature");
  assert.equal(e.type, "invalid_request_error");
  e = await refusal(client.chat.completions.create({
    model: MODEL, messages, tools: [{ type: "function", function: { name: "f" } }],
    tool_choice: { type: "function", function: { name: "g" } },
  }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "tool_choice");
  e = await refusal(client.chat.completions.create({
    model: MODEL, messages, tools: [{ type: "function", function: { name: "no spaces" } }],
  }));
  assert.equal(e.param, "tools[0].function.name");
  e = await refusal(client.chat.completions.create({
    model: MODEL, messages, response_format: { type: "json_schema", json_schema: {
      name: "n", schema: { type: "object", properties: { a: { type: "string", not: { pattern: "^x" } } } } } },
  }));
  assert.equal(e.param, "response_format.json_schema.schema.properties.a.not.pattern");
  e = await refusal(client.chat.completions.create({ model: "no-such-model", messages }));
  assert.equal(e.status, 404);
  assert.equal(e.code, "model_not_found");
  e = await refusal(client.completions.create({ model: MODEL, prompt: [1, 2, 10 ** 9] }));
  assert.equal(e.param, "prompt[2]");
  e = await refusal(client.chat.completions.create({
    model: MODEL, messages: [{ role: "function", content: "x", name: "f" }],
  }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "messages[0].role");
});

check("API keys", async () => {
  const anonymous = new OpenAI({ baseURL: BASE_URL, apiKey: "wrong-key", maxRetries: 0 });
  let e = await refusal(anonymous.models.list());
  assert.equal(e.status, 401);
  e = await refusal(anonymous.chat.completions.create({ model: MODEL, messages }));
  assert.equal(e.status, 401);
  assert.equal(e.type, "authentication_error");
  const r = await other.completions.create({ model: MODEL, prompt, max_tokens: 1 });
  assert.equal(r.choices.length, 1);
});

check("the per-key limit answers 429 while the key's streams run", async () => {
  const limit = Number(PER_KEY_LIMIT);
  const streams = [];
  for (let i = 0; i < limit; ++i) {
    // Long enough to outlast the checks below: no end of text, 100k tokens.
    streams.push(await other.completions.create({
      model: MODEL, prompt, max_tokens: 100000, stream: true, attn_ignore_eos: true,
    }));
  }
  const e = await refusal(other.completions.create({ model: MODEL, prompt, max_tokens: 1 }));
  assert.equal(e.status, 429);
  assert.equal(e.type, "rate_limit_error");
  // Another key is not held back.
  await client.completions.create({ model: MODEL, prompt, max_tokens: 1 });
  for (const s of streams) s.controller.abort();
  // Aborted streams give their tickets back.
  for (let attempt = 0; ; ++attempt) {
    try {
      await other.completions.create({ model: MODEL, prompt, max_tokens: 1 });
      break;
    } catch (err) {
      if (err.status !== 429 || attempt > 50) throw err;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
});

let failed = 0;
for (const { name, body } of checks) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    ++failed;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}
process.exit(failed ? 1 : 0);
