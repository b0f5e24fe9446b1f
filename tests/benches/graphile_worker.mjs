// graphile-worker in batched mode, the queue tests/benches/throughput_anchors.rs compares the relay
// with, on a database of its own: <jobs> jobs added in bulk, a task that does nothing, concurrency 16
// (a pool of 18 connections), a local queue of 500, completions and failures batched without delay. Prints one JSON line: the
// jobs completed and the seconds from the first job started to the last completion.
//
// Usage: node graphile_worker.mjs <graphile-worker install directory> <database URL> <jobs>

import { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [installDir, connectionString, jobsArgument] = process.argv.slice(2);
const jobs = Number(jobsArgument);
// Installed once per machine outside the repository (scripts/setup-toolchains), so it is resolved
// from there rather than from this file's directory.
const resolve = createRequire(join(installDir, "package.json")).resolve;
const { run, makeWorkerUtils, Logger } = await import(pathToFileURL(resolve("graphile-worker")).href);

// Warnings and errors only: the default logger's lines would cost the queue time of its own.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    console.error(`graphile-worker ${level}: ${message}`);
  }
});

const utils = await makeWorkerUtils({ connectionString, logger });
await utils.migrate();
// A completed job is deleted. Each deleting statement notes how many jobs it completed and when, so
// only completions the database accepted count, timed on its clock (one small insert per batch).
await utils.withPgClient((client) =>
  client.query(`
    CREATE TABLE bench_completions (jobs bigint NOT NULL, at timestamptz NOT NULL);
    CREATE FUNCTION bench_note_completions() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO bench_completions SELECT count(*), clock_timestamp() FROM completed;
      RETURN NULL;
    END $$;
    CREATE TRIGGER bench_note_completions AFTER DELETE ON graphile_worker._private_jobs
      REFERENCING OLD TABLE AS completed FOR EACH STATEMENT
      EXECUTE FUNCTION bench_note_completions();`),
);
const CHUNK = 10_000;
for (let added = 0; added < jobs; added += CHUNK) {
  const count = Math.min(CHUNK, jobs - added);
  await utils.addJobs(Array.from({ length: count }, (_, n) => ({ identifier: "noop", payload: { n: added + n } })));
}
const completions = () =>
  utils.withPgClient(async (client) => {
    const { rows } = await client.query(
      "SELECT coalesce(sum(jobs), 0)::bigint AS completed, \
              (extract(epoch FROM max(at)) * 1000)::float8 AS last_ms FROM bench_completions",
    );
    return { completed: Number(rows[0].completed), lastMs: rows[0].last_ms };
  });

const events = new EventEmitter();
let startedMs;
events.once("job:start", () => {
  startedMs = Date.now();
});
const runner = await run({
  logger,
  events,
  noHandleSignals: true,
  taskList: { noop: async () => {} },
  preset: {
    worker: {
      connectionString,
      concurrentJobs: 16,
      // What graphile-worker asks for (it warns when the pool is smaller than the concurrency).
      maxPoolSize: 18,
      localQueue: { size: 500 },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
});
// The harness polls a table of a few thousand rows at most, every 20 ms, on a connection of its own.
const deadline = Date.now() + 600_000;
while ((await completions()).completed < jobs && Date.now() < deadline) {
  await new Promise((resolve) => setTimeout(resolve, 20));
}
await runner.stop();
const { completed, lastMs } = await completions();
await utils.release();
// Node's clock and PostgreSQL's are this machine's one clock.
console.log(JSON.stringify({ completed, seconds: (lastMs - startedMs) / 1000, node: process.version }));
