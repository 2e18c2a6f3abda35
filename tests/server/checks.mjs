// What the npm-client tests share: named checks that report as they go and
// count failures, and the exit that reports the count.
let failures = 0;

export async function check(name, body) {
  try {
    await body();
    console.log(`  ok: ${name}`);
  } catch (e) {
    failures++;
    console.log(`  FAIL: ${name}: ${e.stack || e}`);
  }
}

export function exitWithFailures() {
  if (failures > 0) console.log(`${failures} check(s) failed`);
  process.exit(failures ? 1 : 0);
}
