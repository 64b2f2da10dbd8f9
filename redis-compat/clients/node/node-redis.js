// node-redis v4, unchanged: a transaction (MULTI/EXEC, and WATCH aborting
// one), and a subscriber on its own connection receiving messages.
// Usage: node node-redis.js PORT
"use strict";
const assert = require("assert");
const { createClient, WatchError } = require("redis");

const port = Number(process.argv[2]);

async function main() {
  const c = createClient({ socket: { host: "127.0.0.1", port } });
  c.on("error", (e) => console.error("client error", e));
  await c.connect();
  await c.del(["k", "n", "list"]);

  const replies = await c.multi().set("k", "v").incr("n").incr("n").rPush("list", ["a", "b"]).get("k").exec();
  assert.deepStrictEqual(replies, ["OK", 1, 2, 2, "v"]);

  // WATCH: another client's write makes EXEC fail with WatchError.
  const iso = await c.executeIsolated(async (ic) => {
    await ic.watch("n");
    const other = c.duplicate();
    await other.connect();
    await other.incr("n");
    await other.quit();
    try {
      await ic.multi().incr("n").exec();
      return "ran";
    } catch (e) {
      return e instanceof WatchError ? "aborted" : String(e);
    }
  });
  assert.strictEqual(iso, "aborted", "WATCH aborts the transaction");
  assert.strictEqual(await c.get("n"), "3");

  // A subscriber on a duplicate connection, to a channel and a pattern.
  const sub = c.duplicate();
  await sub.connect();
  const chan = [];
  const pat = [];
  await sub.subscribe("news", (msg, ch) => chan.push([ch, msg]));
  await sub.pSubscribe("new*", (msg, ch) => pat.push([ch, msg]));
  for (const m of ["one", "two"]) {
    await c.publish("news", m);
  }
  for (let i = 0; i < 500 && (chan.length < 2 || pat.length < 2); i++) {
    await new Promise((res) => setTimeout(res, 10));
  }
  assert.deepStrictEqual(chan, [["news", "one"], ["news", "two"]]);
  assert.deepStrictEqual(pat, [["news", "one"], ["news", "two"]]);
  assert.strictEqual(await c.publish("news", "three"), 2, "one channel and one pattern receiver");
  await sub.unsubscribe("news");
  await sub.pUnsubscribe("new*");
  assert.strictEqual(await c.publish("news", "four"), 0, "nobody listens after unsubscribe");
  await sub.quit();
  await c.quit();
  console.log("node-redis v4: ok");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
