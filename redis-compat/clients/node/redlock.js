// node-redlock v5 on ioredis, unchanged: acquire, extend, release, a
// contended acquire that fails after its retries, `using` with automatic
// extension, and concurrent locked increments that must end exact.
// Usage: node redlock.js PORT
"use strict";
const assert = require("assert");
const Redis = require("ioredis");
const { default: Redlock, ExecutionError } = require("redlock");

const port = Number(process.argv[2]);
const WORKERS = 8;
const ROUNDS = 50;

function client() {
  return new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 2 });
}

async function main() {
  const r = client();
  await r.del("a", "counter");
  const redlock = new Redlock([r], { retryCount: 0 });

  const lock = await redlock.acquire(["a"], 5000);
  assert.ok((await r.pttl("a")) > 0, "lock key has a ttl");
  const extended = await lock.extend(20000);
  assert.ok((await r.pttl("a")) > 10000, "extend took effect");

  // Held: a second acquire with no retries fails.
  await assert.rejects(redlock.acquire(["a"], 5000), ExecutionError);
  await extended.release();
  assert.strictEqual(await r.exists("a"), 0, "released");

  // `using` runs a routine under the lock and releases it after.
  const seen = await redlock.using(["u"], 1000, async (signal) => {
    assert.ok(!signal.aborted);
    return r.exists("u");
  });
  assert.strictEqual(seen, 1, "held inside using");
  assert.strictEqual(await r.exists("u"), 0, "released after using");

  // Contended increments through several clients with retries.
  const clients = Array.from({ length: WORKERS }, client);
  await Promise.all(
    clients.map(async (c) => {
      const rl = new Redlock([c], { retryCount: 1000, retryDelay: 5, retryJitter: 5 });
      for (let i = 0; i < ROUNDS; i++) {
        const l = await rl.acquire(["inc"], 10000);
        const v = Number((await c.get("counter")) || 0);
        await c.set("counter", v + 1);
        await l.release();
      }
    })
  );
  assert.strictEqual(Number(await r.get("counter")), WORKERS * ROUNDS, "counter exact");
  for (const c of clients) c.disconnect();
  r.disconnect();
  console.log("node-redlock (ioredis): ok");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
