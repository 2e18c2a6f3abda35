// The Responses API through the official openai npm client against two real
// server replicas that share a Redis (tests/server/responses_serve.sh starts
// them with scripted models: "qwen-chat" renders Qwen 2.5's real chat
// template and answers "Hello there.", "qwen-tools" the same template but
// calls get_weather until a tool result is in the conversation,
// "plain-chat" the built-in plain format): responses.create with instructions, a chain
// of turns by previous_response_id alternating between the replicas whose
// every turn prefills only its new input, responses.stream, function
// tools with the function_call_output turn, retrieve and delete from
// either replica, store: false, max_output_tokens, and refusals that name
// their field.
//   node responses_client.mjs BASE_URL_A BASE_URL_B
import assert from "node:assert/strict";
import OpenAI from "openai";
import { check, exitWithFailures } from "./checks.mjs";

const replicas = [process.argv[2], process.argv[3]].map(
  (baseURL) => new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 }));
const [a, b] = replicas;
const model = "qwen-chat";
const tooled = "qwen-tools";
const weather = {
  type: "function",
  name: "get_weather",
  description: "Current weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};
// The state tier's writes are asynchronous: a reader's pause lets the
// previous turn's state land before the other replica looks for it.
const pause = () => new Promise((done) => setTimeout(done, 300));
async function refused(request, param, status = 400) {
  await assert.rejects(request, (e) => {
    assert.equal(e.status, status, e.message);
    assert.equal(e.param, param, e.message);
    return true;
  });
}
// The context a turn did not prefill is the whole conversation before it:
// the previous turn's input and its output (its last token included).
function assertContinues(turn, previous) {
  assert.equal(turn.usage.input_tokens_details.cached_tokens,
               previous.usage.input_tokens + previous.usage.output_tokens,
               JSON.stringify({ turn: turn.usage, previous: previous.usage }));
}

await check("create: a string input, instructions, the response object", async () => {
  const r = await a.responses.create({ model, input: "Hello?", instructions: "Be brief." });
  assert.match(r.id, /^resp_[0-9a-f]{32}$/);
  assert.equal(r.object, "response");
  assert.equal(r.status, "completed");
  assert.equal(r.model, model);
  assert.equal(r.instructions, "Be brief.");
  assert.equal(r.output_text, "Hello there.");
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, "message");
  assert.equal(r.output[0].role, "assistant");
  assert.match(r.output[0].id, /^msg_/);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.store, true);
});

await check("a chain by previous_response_id across replicas prefills only new input", async () => {
  let previous = await a.responses.create({ model, input: "Turn 1.", instructions: "Be brief." });
  const prefilled = [];
  for (let turn = 2; turn <= 8; turn++) {
    await pause();
    const client = replicas[turn % 2];  // b, a, b, ...: every turn on the other replica
    const r = await client.responses.create({
      model, input: `Turn ${turn}.`, instructions: "Be brief.", previous_response_id: previous.id,
    });
    assert.equal(r.previous_response_id, previous.id);
    assert.equal(r.output_text, "Hello there.");
    assertContinues(r, previous);
    prefilled.push(r.usage.input_tokens - r.usage.input_tokens_details.cached_tokens);
    previous = r;
  }
  // Every turn reads the same few new tokens, however long the chat grew.
  assert.ok(prefilled.every((n) => n === prefilled[0]), JSON.stringify(prefilled));
  assert.ok(previous.usage.input_tokens > 4 * prefilled[0], JSON.stringify(previous.usage));
});

await check("responses.stream: the events, and the final response they assemble", async () => {
  const first = await a.responses.create({ model, input: "Hi.", instructions: "Be brief." });
  await pause();
  const stream = b.responses.stream({
    model, input: "Again.", instructions: "Be brief.", previous_response_id: first.id,
  });
  const events = [];
  let text = "";
  for await (const event of stream) {
    events.push(event);
    if (event.type === "response.output_text.delta") text += event.delta;
  }
  const final = await stream.finalResponse();
  const types = events.map((e) => e.type);
  assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress",
                                       "response.output_item.added",
                                       "response.content_part.added"]);
  assert.deepEqual(types.slice(-4), ["response.output_text.done", "response.content_part.done",
                                     "response.output_item.done", "response.completed"]);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(text, "Hello there.");
  assert.equal(final.output[0].content[0].text, "Hello there.");
  assert.equal(final.status, "completed");
  assertContinues(final, first);
  // Stored once complete: the other replica returns it whole.
  await pause();
  const stored = await a.responses.retrieve(final.id);
  assert.equal(stored.output[0].id, final.output[0].id);
  assert.equal(stored.output[0].content[0].text, "Hello there.");
});

await check("function tools: a call, then the function_call_output turn", async () => {
  const ask = { model: tooled, tools: [weather], instructions: "Use tools." };
  const r = await a.responses.create({ ...ask, input: "What is the weather in Paris?" });
  assert.equal(r.output.length, 1, JSON.stringify(r.output));
  const call = r.output[0];
  assert.equal(call.type, "function_call");
  assert.equal(call.name, "get_weather");
  assert.match(call.call_id, /^call_/);
  assert.deepEqual(JSON.parse(call.arguments), { city: "Paris" });
  assert.deepEqual(r.tools.map((t) => t.name), ["get_weather"]);
  await pause();
  const answer = await b.responses.create({
    ...ask, previous_response_id: r.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" }],
  });
  assert.equal(answer.output_text, "It is sunny in Paris.");
  // Qwen's template writes the call back exactly as the model wrote it.
  assertContinues(answer, r);
});

await check("tool_choice required and a named function force the call", async () => {
  for (const tool_choice of ["required", { type: "function", name: "get_weather" }]) {
    const r = await a.responses.create({
      model: tooled, tools: [weather], tool_choice, input: "What is the weather in Paris?" });
    assert.equal(r.output[0].type, "function_call", JSON.stringify(r.output));
    assert.equal(r.output[0].name, "get_weather");
    assert.deepEqual(JSON.parse(r.output[0].arguments), { city: "Paris" });
    assert.deepEqual(r.tool_choice, tool_choice);
  }
});

await check("function tools, streamed: the argument events and the final call", async () => {
  const stream = a.responses.stream({
    model: tooled, tools: [weather], input: "What is the weather in Paris?",
  });
  const types = [];
  for await (const event of stream) types.push(event.type);
  const final = await stream.finalResponse();
  assert.ok(types.includes("response.function_call_arguments.delta"), types.join());
  assert.ok(types.includes("response.function_call_arguments.done"), types.join());
  assert.equal(final.output[0].type, "function_call");
  assert.deepEqual(JSON.parse(final.output[0].arguments), { city: "Paris" });
});

await check("a whole conversation as input items, no previous_response_id", async () => {
  const r = await a.responses.create({
    model: tooled, tools: [weather],
    input: [
      { role: "user", content: [{ type: "input_text", text: "What is the weather in Paris?" }] },
      { type: "function_call", call_id: "call_1", name: "get_weather",
        arguments: "{\"city\": \"Paris\"}" },
      { type: "function_call_output", call_id: "call_1", output: "sunny" },
    ],
  });
  assert.equal(r.output_text, "It is sunny in Paris.");
});

await check("the built-in plain format continues too", async () => {
  const first = await a.responses.create({ model: "plain-chat", input: "Hello?" });
  const second = await a.responses.create({
    model: "plain-chat", input: "More.", previous_response_id: first.id,
  });
  assert.equal(second.output_text, "Hello there.");
  assert.ok(second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens,
            JSON.stringify(second.usage));
});

await check("retrieve and delete from either replica", async () => {
  const r = await a.responses.create({ model, input: "Keep this.", metadata: { k: "v" } });
  await pause();
  const stored = await b.responses.retrieve(r.id);
  assert.equal(stored.id, r.id);
  assert.deepEqual(stored.output, r.output);
  assert.deepEqual(stored.metadata, { k: "v" });
  assert.deepEqual(stored.usage, r.usage);
  const deleted = await b.responses.del(r.id);
  assert.equal(deleted.deleted, true);
  await pause();
  await refused(a.responses.retrieve(r.id), "id", 404);
  await refused(b.responses.del(r.id), "id", 404);
  await refused(a.responses.create({ model, input: "x", previous_response_id: r.id }),
                "previous_response_id");
});

await check("store: false keeps nothing", async () => {
  const r = await a.responses.create({ model, input: "Forget this.", store: false });
  assert.equal(r.store, false);
  await refused(a.responses.retrieve(r.id), "id", 404);
});

await check("max_output_tokens: an incomplete response", async () => {
  const r = await a.responses.create({ model, input: "Hello?", max_output_tokens: 3 });
  assert.equal(r.status, "incomplete");
  assert.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
  assert.equal(r.output_text, "Hel");
});

await check("refusals name their field", async () => {
  await refused(a.responses.create({ model, input: "x", tool_choice: "required" }), "tool_choice");
  await refused(a.responses.create({
    model, input: "x", text: { format: { type: "json_schema", name: "n",
                                         schema: { type: "object", not: { minProperties: 1 } } } },
  }), "text.format.schema.not.minProperties");
  await refused(a.responses.create({
    model, input: [{ role: "user", content: [{ type: "input_text", text: "x" },
                                             { type: "input_image", image_url: "http://x/y.png" }] }],
  }), "input[0].content[1].type");
  await refused(a.responses.create({ model, input: "x", tools: [{ type: "web_search" }] }),
                "tools[0].type");
  await refused(a.responses.create({ model, input: "x", text: { format: { type: "yaml" } } }),
                "text.format.type");
  await refused(a.responses.create({ model, input: "x", reasoning: { effort: "high" } }),
                "reasoning");
  await refused(a.responses.create({ model, input: [] }), "input");
  await refused(a.responses.create({ model, input: "x", max_output_tokens: 0 }),
                "max_output_tokens");
  await refused(a.responses.create({ model, input: "x", previous_response_id: "resp_none" }),
                "previous_response_id");
  await refused(a.responses.create({ model: "nope", input: "x" }), "model", 404);
});

exitWithFailures();
