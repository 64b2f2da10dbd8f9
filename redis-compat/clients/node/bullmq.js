// BullMQ 5, unchanged: one queue and one worker (concurrency 1, so the
// order of runs is the order BullMQ's Lua scripts hand jobs out) processing
// 1,000 jobs: some fail their first attempt or two and succeed on a retry
// (attempts + fixed backoff), some always fail, some are delayed, some have
// priorities, and a job scheduler repeats a job every 100 ms, 5 times.
// A QueueEvents reads the events stream (XADD MAXLEN ~ in the scripts,
// XREAD BLOCK here). At the end getJobCounts, the events seen, each job's
// attemptsMade and the number of times the processor ran each job must be
// exactly the expected ones.
// Usage: node bullmq.js PORT
"use strict";
const assert = require("assert");
const { Queue, QueueEvents, Worker } = require("bullmq");

const port = Number(process.argv[2]);
const connection = { host: "127.0.0.1", port, maxRetriesPerRequest: null };
const N = 1000;
const REPEATS = 5;
const DEADLINE_MS = 90000;

// What each job i does: how many attempts fail before one succeeds
// (Infinity: all), its attempts, delay and priority.
function plan(i) {
  let failFirst = 0;
  if (i % 10 === 1) failFirst = 1;
  if (i % 25 === 2) failFirst = 2;
  if (i % 50 === 3) failFirst = Infinity;
  const opts = { attempts: 3, backoff: { type: "fixed", delay: 20 } };
  if (i % 20 === 5) opts.delay = 30 + (i % 3) * 10;
  else if (i % 7 === 6) opts.priority = 1 + (i % 4);
  return { failFirst, opts };
}

async function main() {
  const timer = setTimeout(() => {
    console.error("bullmq: overall timeout");
    process.exit(1);
  }, DEADLINE_MS);
  const prefix = "bq" + Date.now();
  const queue = new Queue("jobs", { connection, prefix });
  await queue.waitUntilReady();
  // QueueEvents reads the events stream (XREAD BLOCK) from its start.
  const events = new QueueEvents("jobs", { connection, prefix, lastEventId: "0-0", blockingTimeout: 1000 });
  const seen = { completed: 0, failed: 0 };
  events.on("completed", () => seen.completed++);
  events.on("failed", () => seen.failed++);
  await events.waitUntilReady();

  const runs = new Map(); // job name -> times the processor ran it
  const prioFirstRuns = []; // [priority, i] of prioritized jobs' first runs
  let expectCompleted = REPEATS;
  let expectFailed = 0;
  let expectRuns = 0;
  const jobs = [];
  for (let i = 0; i < N; i++) {
    const { failFirst, opts } = plan(i);
    jobs.push({ name: "j" + i, data: { i, failFirst: failFirst === Infinity ? -1 : failFirst }, opts });
    if (failFirst === Infinity) {
      expectFailed++;
      expectRuns += opts.attempts;
    } else {
      expectCompleted++;
      expectRuns += failFirst + 1;
    }
  }
  expectRuns += REPEATS;
  // Added before the worker starts, in batches (addBulk is one MULTI).
  for (let k = 0; k < N; k += 100) {
    await queue.addBulk(jobs.slice(k, k + 100));
  }
  await queue.upsertJobScheduler("tick", { every: 100, limit: REPEATS }, { name: "tick", data: {} });

  let done = 0;
  const worker = new Worker(
    "jobs",
    async (job) => {
      const n = (runs.get(job.name) || 0) + 1;
      runs.set(job.name, n);
      if (job.name === "tick") return "tick";
      const { i, failFirst } = job.data;
      if (n === 1 && job.opts.priority) prioFirstRuns.push([job.opts.priority, i]);
      if (failFirst === -1 || n <= failFirst) throw new Error(`planned failure of ${i} (run ${n})`);
      return i * 2;
    },
    { connection, prefix, concurrency: 1 },
  );
  worker.on("error", (e) => console.error("worker error", e));
  const finished = () => done++;
  worker.on("completed", finished);
  worker.on("failed", (job) => {
    if (job && job.attemptsMade >= job.opts.attempts) finished();
  });

  const want = expectCompleted + expectFailed;
  while (done < want) {
    await new Promise((res) => setTimeout(res, 20));
  }
  await worker.close();

  const counts = await queue.getJobCounts(
    "completed",
    "failed",
    "delayed",
    "active",
    "wait",
    "waiting",
    "prioritized",
    "paused",
    "waiting-children",
  );
  const expectCounts = {
    completed: expectCompleted,
    failed: expectFailed,
    delayed: 0,
    active: 0,
    wait: 0,
    waiting: 0,
    prioritized: 0,
    paused: 0,
    "waiting-children": 0,
  };
  assert.deepStrictEqual(counts, expectCounts, "getJobCounts");

  // The events stream told QueueEvents of every completion and failure.
  for (let k = 0; k < 500 && seen.completed + seen.failed < want; k++) {
    await new Promise((res) => setTimeout(res, 10));
  }
  assert.deepStrictEqual(seen, { completed: expectCompleted, failed: expectFailed }, "QueueEvents");
  await events.close();

  // Runs per job, as the processor saw them and as BullMQ recorded them.
  let total = 0;
  for (const n of runs.values()) total += n;
  assert.strictEqual(total, expectRuns, "total processor runs");
  assert.strictEqual(runs.get("tick"), REPEATS, "the repeatable job ran its limit");
  const all = [...(await queue.getCompleted(0, -1)), ...(await queue.getFailed(0, -1))];
  assert.strictEqual(all.length, want, "completed + failed jobs listed");
  for (const job of all) {
    if (job.name === "tick") continue;
    const { i } = job.data;
    const { failFirst, opts } = plan(i);
    const expect = failFirst === Infinity ? opts.attempts : failFirst + 1;
    assert.strictEqual(runs.get(job.name), expect, `runs of ${job.name}`);
    assert.strictEqual(job.attemptsMade, expect, `attemptsMade of ${job.name}`);
    if (failFirst === Infinity) {
      assert.strictEqual(job.failedReason, `planned failure of ${i} (run ${expect})`);
    } else {
      assert.strictEqual(job.returnvalue, i * 2, `return value of ${job.name}`);
    }
  }
  // Prioritized jobs were all waiting when the worker started: their first
  // runs come out by (priority, insertion order).
  const sorted = [...prioFirstRuns].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  assert.deepStrictEqual(prioFirstRuns, sorted, "prioritized jobs first run in priority order");
  assert.strictEqual(prioFirstRuns.length, jobs.filter((j) => j.opts.priority).length);

  await queue.obliterate({ force: true });
  await queue.close();
  clearTimeout(timer);
  console.log(`bullmq: ok (${want} jobs, ${total} runs, counts ${JSON.stringify(counts)})`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
