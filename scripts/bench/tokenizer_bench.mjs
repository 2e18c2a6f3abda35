// tokenizers.js's encoding throughput on a text file, line by line, median
// of five passes: the peer of `attn-tokenize-json --bench`. Copied beside
// node_modules by the scripts that run it (an ES module resolves packages
// from where it lies).
//   node tokenizer_bench.mjs TOKENIZER_JSON TEXT_FILE
import { readFileSync } from "fs";
import { Tokenizer } from "@huggingface/tokenizers";
const [, , tokenizerPath, textPath] = process.argv;
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const lines = readFileSync(textPath, "utf8").split("\n");
const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l), 0);
const rates = [];
let tokens = 0;
for (let run = 0; run < 5; ++run) {
  tokens = 0;
  const start = process.hrtime.bigint();
  for (const line of lines) tokens += tokenizer.encode(line, { add_special_tokens: false }).ids.length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  rates.push(bytes / seconds / 1e6);
}
rates.sort((a, b) => a - b);
console.log(JSON.stringify({ mb_per_s: rates[2], bytes, tokens, implementation: "tokenizers.js" }));
