// Structured output through the official openai npm client against the
// real server serving the bundled rwkv7 model (tests/server/
// structured_output.sh): every finished output is checked by an
// independent validator (ajv with ajv-formats), at temperature 1 too.
//   node structured_client.mjs BASE_URL SCHEMA_DIR
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { check, exitWithFailures } from "./checks.mjs";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const [baseURL, schemaDir] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused" });
const model = "rwkv7";
const ajv = new Ajv({ strict: false, allErrors: true, validateSchema: false });
addFormats(ajv);
function validator(schema) {
  const { $schema, id, ...rest } = schema;  // ajv knows neither draft-04's marker nor its id
  return ajv.compile(rest);
}
function assertValid(validate, text, what) {
  const value = JSON.parse(text);
  assert.ok(validate(value), `${what}: ${text}\n${JSON.stringify(validate.errors)}`);
  return value;
}
const ask = (content) => [{ role: "user", content }];

// Real schemas (MaskBench cases), each until one output finishes: a tiny
// model may ramble inside a free string past max_tokens (a truncated
// output is not checked), so a dozen of the thirteen must finish.
const files = fs.readdirSync(schemaDir).filter((f) => f.endsWith(".json")).sort();
let finishedSchemas = 0, outputs = 0;
for (const file of files) {
  await check(`${file}: finished outputs validate`, async () => {
    const schema = JSON.parse(fs.readFileSync(path.join(schemaDir, file), "utf8")).schema;
    const validate = validator(schema);
    for (let seed = 1; seed <= 6; ++seed) {
      const r = await client.chat.completions.create({
        model, messages: ask("Answer in JSON."), temperature: 1, seed, max_tokens: 400,
        response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
      });
      const choice = r.choices[0];
      if (choice.finish_reason !== "stop") continue;
      ++outputs;
      assertValid(validate, choice.message.content, file);
      ++finishedSchemas;
      return;
    }
    console.log(`    (${file}: no output finished within 6 tries of 400 tokens)`);
  });
}
await check("a dozen schemas produced valid JSON", async () => {
  assert.ok(finishedSchemas >= 12, `${finishedSchemas} of ${files.length}`);
});

const person = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    born: { type: "string", format: "date" },
    tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
  },
  required: ["name", "age", "born", "tags"],
  additionalProperties: false,
};

await check("a streamed json_schema reply, assembled, validates", async () => {
  const stream = await client.chat.completions.create({
    model, messages: ask("A person?"), stream: true, temperature: 1, seed: 3, max_tokens: 300,
    response_format: { type: "json_schema", json_schema: { name: "person", schema: person } },
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "stop");
  assertValid(validator(person), text, "stream");
});

await check("zodResponseFormat and parse() give a typed object", async () => {
  const Event = z.object({ title: z.string().max(20), day: z.number().int().min(1).max(31),
                           kind: z.enum(["meeting", "call"]), remote: z.boolean() });
  const r = await client.beta.chat.completions.parse({
    model, messages: ask("An event?"), temperature: 1, seed: 5, max_tokens: 300,
    response_format: zodResponseFormat(Event, "event"),
  });
  const parsed = r.choices[0].message.parsed;
  assert.ok(parsed, JSON.stringify(r.choices[0]));
  Event.parse(parsed);
});

await check("json_object gives one JSON object", async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model, messages: ask("JSON?"), temperature: 1, seed, max_tokens: 300,
      response_format: { type: "json_object" } });
    if (r.choices[0].finish_reason !== "stop") continue;
    const value = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof value, "object");
    assert.ok(value !== null && !Array.isArray(value));
    return;
  }
  throw new Error("no json_object output finished");
});

await check("attn_structured: choice and regex on completions", async () => {
  const choices = ["yes", "no", "the LORD"];
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.completions.create({
      model, prompt: "And it came to pass", temperature: 1, seed, max_tokens: 20,
      attn_structured: { choice: choices } });
    assert.ok(choices.includes(r.choices[0].text), r.choices[0].text);
    assert.equal(r.choices[0].finish_reason, "stop");
  }
  const r = await client.completions.create({
    model, prompt: "Date:", temperature: 1, seed: 9, max_tokens: 30,
    attn_structured: { regex: "[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]" } });
  assert.match(r.choices[0].text, /^[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]$/);
});

await check("attn_structured: a GBNF grammar", async () => {
  const grammar = 'root ::= "(" expr ")"\nexpr ::= [0-9]{1,3} ( [-+*] [0-9]{1,3} ){0,3}';
  const r = await client.completions.create({
    model, prompt: "Sum:", temperature: 1, seed: 2, max_tokens: 40, attn_structured: { grammar } });
  assert.match(r.choices[0].text, /^\([0-9]{1,3}([-+*][0-9]{1,3}){0,3}\)$/);
});

const weather = {
  type: "function",
  function: { name: "get_weather", parameters: {
    type: "object", properties: { city: { type: "string", maxLength: 10 },
                                  unit: { enum: ["c", "f"] } },
    required: ["city", "unit"], additionalProperties: false } },
};
const noop = { type: "function", function: { name: "noop", parameters: { type: "object", properties: {} } } };

// Like the schemas above, a tiny model may ramble (JSON whitespace between
// the arguments) past max_tokens: each choice gets six seeds to finish, a
// truncated output is not checked, and one of them must finish.
await check("tool_choice required and named: calls whose arguments validate", async () => {
  const validate = validator(weather.function.parameters);
  for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }]) {
    let choice = null;
    for (let seed = 4; seed < 10; ++seed) {
      const r = await client.chat.completions.create({
        model, messages: ask("Weather in Paris?"), tools: [weather, noop], tool_choice,
        temperature: 1, seed, max_tokens: 400, parallel_tool_calls: false });
      choice = r.choices[0];
      if (choice.finish_reason !== "length") break;
    }
    assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
    const call = choice.message.tool_calls[0];
    if (typeof tool_choice === "object") assert.equal(call.function.name, "get_weather");
    if (call.function.name === "get_weather") assertValid(validate, call.function.arguments, "arguments");
  }
});

await check("the Responses API's text.format json_schema", async () => {
  const r = await client.responses.create({
    model, input: "A person?", temperature: 1, max_output_tokens: 300,
    text: { format: { type: "json_schema", name: "person", schema: person, strict: true } } });
  assert.equal(r.status, "completed", JSON.stringify(r));
  assertValid(validator(person), r.output_text, "responses");
  assert.equal(r.text.format.type, "json_schema");
});

await check("a keyword the server cannot enforce is refused by its path", async () => {
  const e = await client.chat.completions.create({
    model, messages: ask("x"),
    response_format: { type: "json_schema", json_schema: { name: "n", schema: {
      type: "object", properties: { n: { type: "number", multipleOf: 0.5 } } } } },
  }).then(() => null, (err) => err);
  assert.equal(e?.status, 400);
  assert.equal(e.param, "response_format.json_schema.schema.properties.n.multipleOf");
});

console.log(`${outputs} finished constrained outputs validated`);
exitWithFailures();
