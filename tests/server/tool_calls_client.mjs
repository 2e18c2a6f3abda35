// Tool calling through the official openai npm client against the real
// server (tests/server/tool_calls_serve.sh starts it with scripted models
// that call get_weather, then answer once a tool result is in the
// conversation): calls read from each format, the tool result turn,
// streamed calls assembled by the client, the runTools helper running the
// whole loop against a local function, tool_choice and parallel_tool_calls.
//   node tool_calls_client.mjs BASE_URL
import assert from "node:assert/strict";
import OpenAI from "openai";
import { check, exitWithFailures } from "./checks.mjs";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused" });
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const ask = [{ role: "user", content: "What is the weather in Paris?" }];

for (const model of ["plain-tools", "qwen-tools", "lfm-tools", "granite-tools"]) {
  await check(`${model}: a reply's tool call comes back as message.tool_calls`, async () => {
    const r = await client.chat.completions.create({ model, messages: ask, tools: [weather] });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    const call = choice.message.tool_calls[0];
    assert.match(call.id, /^call_[0-9a-f]{24}$/);
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
    assert.equal(choice.message.content, model === "plain-tools" ? "Checking.\n" : null);
  });

  await check(`${model}: the tool result turn gets the answer`, async () => {
    const first = await client.chat.completions.create({ model, messages: ask, tools: [weather] });
    const call = first.choices[0].message.tool_calls[0];
    // LFM2.5's template reads an assistant's content as text: it gets "".
    const said = model === "lfm-tools" ? { ...first.choices[0].message, content: "" }
                                       : first.choices[0].message;
    const r = await client.chat.completions.create({
      model, tools: [weather],
      messages: [...ask, said,
                 { role: "tool", tool_call_id: call.id, name: "get_weather", content: "sunny, 21 C" }],
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.equal(r.choices[0].message.content, "It is sunny in Paris.");
    assert.equal(r.choices[0].message.tool_calls, undefined);
  });

  await check(`${model}: streamed tool calls assemble in the client`, async () => {
    const stream = await client.chat.completions.create({
      model, messages: ask, tools: [weather], stream: true });
    let content = "";
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? "";
      for (const d of choice.delta.tool_calls ?? []) {
        calls[d.index] ??= { id: "", name: "", arguments: "" };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].name += d.function.name;
        if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
      }
      finish = choice.finish_reason ?? finish;
    }
    assert.equal(finish, "tool_calls");
    assert.ok(!content.includes("tool_call"), `call text leaked into content: ${content}`);
    assert.equal(calls[0].name, "get_weather");
    assert.match(calls[0].id, /^call_/);
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: "Paris" });
  });

  if (model === "lfm-tools") {
    // The client sends an assistant's tool-call message back with content
    // null; LFM2.5's template cannot read that (nor can it in transformers):
    // a 400 naming messages, with the template's line.
    await check(`${model}: a template's failure is a 400 naming messages`, async () => {
      const first = await client.chat.completions.create({ model, messages: ask, tools: [weather] });
      const e = await client.chat.completions.create({
        model, tools: [weather], messages: [...ask, first.choices[0].message] })
        .then(() => null, (err) => err);
      assert.equal(e?.status, 400);
      assert.equal(e.param, "messages");
      assert.match(e.message, /chat template \(lfm2\.5\.jinja\): line \d+/);
    });
    continue;
  }
  await check(`${model}: runTools runs the whole loop`, async () => {
    const seen = [];
    const runner = client.beta.chat.completions.runTools({
      model, messages: ask,
      tools: [{
        type: "function",
        function: {
          name: "get_weather", description: "Current weather in a city.",
          parameters: weather.function.parameters, parse: JSON.parse,
          function: (args) => { seen.push(args); return "sunny, 21 C"; },
        },
      }],
    });
    assert.equal(await runner.finalContent(), "It is sunny in Paris.");
    assert.deepEqual(seen[0], { city: "Paris" });
  });
}

await check("tool_choice none: calls stay text", async () => {
  const r = await client.chat.completions.create({
    model: "qwen-tools", messages: ask, tools: [weather], tool_choice: "none" });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.match(r.choices[0].message.content, /<tool_call>/);
  assert.equal(r.choices[0].finish_reason, "stop");
});

await check("parallel_tool_calls false keeps the first call", async () => {
  const both = await client.chat.completions.create({
    model: "lfm-tools", messages: [{ role: "user", content: "Paris and Zürich?" }], tools: [weather] });
  assert.equal(both.choices[0].message.tool_calls.length, 2);
  const one = await client.chat.completions.create({
    model: "lfm-tools", messages: [{ role: "user", content: "Paris and Zürich?" }], tools: [weather],
    parallel_tool_calls: false });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
});

await check("required and named tool_choice force a call of the tools", async () => {
  // The grammar of a call (docs/structured-output.md) lets the scripted
  // call through unchanged; a function not in tools is refused by name.
  const lookup = { type: "function", function: { name: "lookup", parameters: { type: "object" } } };
  for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }]) {
    const r = await client.chat.completions.create({
      model: "qwen-tools", messages: ask, tools: [weather, lookup], tool_choice });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(r.choices[0].message.tool_calls[0].function.name, "get_weather");
    assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments),
                     { city: "Paris" });
  }
  const e = await client.chat.completions
    .create({ model: "qwen-tools", messages: ask, tools: [weather],
              tool_choice: { type: "function", function: { name: "missing" } } })
    .then(() => null, (err) => err);
  assert.equal(e?.status, 400);
  assert.equal(e.param, "tool_choice");
});

exitWithFailures();
