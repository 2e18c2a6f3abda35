// The chat page in Debian's headless Chromium, driven by puppeteer-core:
// the page loads the models, a message is sent, streamed text appears with
// its statistics, a new conversation clears it, and a screenshot is saved.
// Run by tests/server/openai_clients.sh.
//   PAGE_URL=http://127.0.0.1:PORT/ KEY=... SCREENSHOT=out.png node chat_page.mjs
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

const { PAGE_URL, KEY, SCREENSHOT, CHROMIUM = "/usr/bin/chromium" } = process.env;
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("requestfailed", (r) => {
    if (!r.url().endsWith("/v1/chat/completions")) problems.push(`request failed: ${r.url()}`);
  });
  await page.setViewport({ width: 1000, height: 700 });
  await page.goto(PAGE_URL, { waitUntil: "load" });
  // The server wants a key: the page says so, then lists the models with it.
  await page.waitForSelector(".error", { timeout: 10000 });
  await page.type("#api-key", KEY);
  await page.$eval("#api-key", (e) => e.dispatchEvent(new Event("change")));
  await page.waitForFunction(() => document.querySelectorAll("#model option").length >= 2,
                             { timeout: 10000 });
  await page.click("#new-chat");

  await page.type("#input", "the river keeps its small state");
  await page.keyboard.press("Enter");
  await page.waitForSelector(".msg.user", { timeout: 5000 });
  // Streamed text, then the statistics line once the reply is done.
  await page.waitForFunction(
    () => document.querySelector(".msg.assistant")?.textContent.length > 0, { timeout: 30000 });
  await page.waitForSelector(".msg.assistant .stats", { timeout: 30000 });
  const stats = await page.$eval(".msg.assistant .stats", (e) => e.textContent);
  assert.match(stats, /\d+ tokens, [\d.]+ tokens\/s, first token [\d.]+ s, \d+ of \d+ prompt tokens reused/);

  // A second turn sends the whole conversation, whose start the state
  // cache holds.
  await page.type("#input", "and then?");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant .stats").length === 2,
                             { timeout: 30000 });
  const second = await page.$$eval(".msg.assistant .stats", (e) => e[1].textContent);
  const reused = Number(second.match(/(\d+) of \d+ prompt tokens reused/)[1]);
  assert.ok(reused > 0, second);
  await page.screenshot({ path: SCREENSHOT });

  await page.click("#new-chat");
  assert.equal(await page.$$eval(".msg", (e) => e.length), 0);
  assert.deepEqual(problems, []);
  console.log(`ok   chat page (${stats}); screenshot ${SCREENSHOT}`);
} finally {
  await browser.close();
}
