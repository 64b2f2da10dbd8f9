// ioredis, unchanged, following Redis Sentinel across a failover:
// `new Redis({ sentinels, name: "mymaster" })` writes (each acknowledged
// only once `WAIT 1 1000` says a replica has it, so a promoted replica
// must have it), then the primary is killed (kill -9), and writes go on
// through the same client to the new primary. Every acknowledged write
// must be there. Run by sentinel-run.sh, which starts the nodes and
// sentinels and gives SENTINEL_PORTS and PRIMARY_PID.
// Usage: node ioredis-sentinel.js
"use strict";
const assert = require("assert");
const Redis = require("ioredis");

const BEFORE = 100;
const AFTER = 100;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const sentinels = process.env.SENTINEL_PORTS.split(" ").map((p) => ({ host: "127.0.0.1", port: Number(p) }));
  const c = new Redis({ sentinels, name: "mymaster", maxRetriesPerRequest: 2, connectTimeout: 500, commandTimeout: 1500 });
  c.on("error", () => {});
  const probe = new Redis({ host: sentinels[0].host, port: sentinels[0].port, lazyConnect: true });
  const masterAddr = async () => (await probe.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")).join(":");
  const old = await masterAddr();
  const acked = new Map();

  // SET then WAIT 1, retried until acknowledged or the deadline.
  async function write(i, deadline) {
    while (Date.now() < deadline) {
      try {
        await c.set(`k${i}`, String(i));
        if ((await c.call("WAIT", 1, 1000)) >= 1) {
          acked.set(`k${i}`, String(i));
          return true;
        }
      } catch (e) {
        // Connection lost, READONLY from a demoted node, a timeout: retry.
      }
      await sleep(10);
    }
    return false;
  }

  for (let i = 0; i < BEFORE; i++) assert.ok(await write(i, Date.now() + 10000), `write ${i} before the failover`);
  process.kill(Number(process.env.PRIMARY_PID), "SIGKILL");
  const start = Date.now();
  for (let i = BEFORE; i < BEFORE + AFTER; i++) assert.ok(await write(i, start + 60000), `write ${i} after the failover`);
  const now = await masterAddr();
  assert.notStrictEqual(now, old, "a new primary");
  const [host, port] = now.split(":");
  const r = new Redis({ host, port: Number(port) });
  assert.strictEqual((await r.call("ROLE"))[0], "master");
  for (const [k, v] of acked) assert.strictEqual(await r.get(k), v, `${k}: acknowledged ${v}`);
  console.log(`ioredis sentinel: ${acked.size} acknowledged writes all on ${now}, ${((Date.now() - start) / 1000).toFixed(1)}s to the last write`);
  r.disconnect();
  probe.disconnect();
  c.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
