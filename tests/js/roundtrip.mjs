// The official JS client (@langchain/langgraph-sdk) against cs-agent's /lg surface, the same
// round trip as tests/integration/test_lg_python_sdk.py. Run by
// tests/integration/test_lg_js_sdk.py with LG_URL (ending in /lg), LG_TOKEN and
// LG_OTHER_TOKEN (another customer), against the scripted model that test sets up.
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

const apiUrl = process.env.LG_URL;
const client = new Client({ apiUrl, apiKey: process.env.LG_TOKEN });
const other = new Client({ apiUrl, apiKey: process.env.LG_OTHER_TOKEN });
const ALL_MODES = ["values", "messages-tuple", "updates", "custom"];
const LONG = Array.from({ length: 60 }, (_, i) => `word${i}`).join(" ");

async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

async function status404(promise) {
  await assert.rejects(promise, (error) => error.status === 404 || /404/.test(String(error)));
}

const textOf = (parts) =>
  parts.filter((p) => p.event === "messages").map((p) => p.data[0].content).join("");

// the answer's text as a client that merges chunks by id sees it: {id: text}
const textById = (parts) => {
  const texts = {};
  for (const p of parts) {
    if (p.event !== "messages" || p.data[0].type !== "AIMessageChunk") continue;
    texts[p.data[0].id] = (texts[p.data[0].id] ?? "") + p.data[0].content;
  }
  return texts;
};

// create -> stream -> interrupt
const thread = await client.threads.create();
assert.equal(thread.status, "idle");
const first = await collect(
  client.runs.stream(thread.thread_id, "agent", {
    input: { messages: [{ type: "human", content: "cancel my order please" }] },
    streamMode: ALL_MODES,
  }),
);
assert.deepEqual(first.slice(0, 2).map((p) => p.event), ["metadata", "values"]);
const last = first.at(-1);
assert.equal(last.event, "values");
const [interrupt] = last.data.__interrupt__;
assert.equal(interrupt.value.action_requests[0].name, "cancel_pending_order");
assert.deepEqual(interrupt.value.review_configs[0].allowed_decisions, ["approve", "reject"]);
assert.equal((await client.threads.get(thread.thread_id)).status, "interrupted");
const paused = await client.threads.getState(thread.thread_id);
assert.equal(paused.tasks[0].interrupts[0].id, interrupt.id);

// resume with decisions
const resumed = await collect(
  client.runs.stream(thread.thread_id, "agent", {
    command: { resume: { decisions: [{ type: "approve" }] } },
    streamMode: ["values", "messages-tuple"],
  }),
);
const finalValues = resumed.filter((p) => p.event === "values").at(-1).data;
assert.equal(finalValues.messages.at(-1).content, "Done: your order is cancelled.");
assert.ok(textOf(resumed).includes("Done: your order is cancelled."));
assert.equal(
  textById(resumed)[finalValues.messages.at(-1).id],
  "Done: your order is cancelled.",
  "the chunks' id is the final message's",
);

// history -> edit via checkpoint
const history = await client.threads.getHistory(thread.thread_id, { limit: 50 });
const firstHuman = finalValues.messages[0].id;
const firstSeen = history
  .filter((s) => (s.values.messages ?? []).some((m) => m.id === firstHuman))
  .at(-1);
const edited = await client.runs.wait(thread.thread_id, "agent", {
  input: { messages: [{ type: "human", content: "where are my orders?" }] },
  checkpoint: firstSeen.parent_checkpoint,
});
assert.deepEqual(
  edited.messages.map((m) => [m.type, m.content]),
  [
    ["human", "where are my orders?"],
    ["ai", "Your orders are on their way."],
  ],
);

// another customer cannot reach the thread
await status404(other.threads.get(thread.thread_id));
await status404(other.threads.getState(thread.thread_id));

// a dropped stream, then joinStream with the last event id
const talk = await client.threads.create();
const seen = [];
const controller = new AbortController();
try {
  for await (const part of client.runs.stream(talk.thread_id, "agent", {
    input: { messages: [{ type: "human", content: "talk" }] },
    streamMode: ["values", "messages-tuple"],
    streamResumable: true,
    signal: controller.signal,
  })) {
    seen.push(part);
    if (seen.filter((p) => p.event === "messages").length >= 3) {
      controller.abort();
    }
  }
} catch (error) {
  if (error.name !== "AbortError") throw error;
}
const runId = seen[0].data.run_id;
const lastId = seen.at(-1).id;
assert.ok(lastId, "a resumable stream's events carry ids");
const rest = await collect(client.runs.joinStream(talk.thread_id, runId, { lastEventId: lastId }));
assert.equal(textOf(seen) + textOf(rest), LONG);
// keyed on the final message's id, the text streamed before and after the drop
const answer = rest.filter((p) => p.event === "values").at(-1).data.messages.at(-1);
assert.equal(answer.content, LONG);
assert.deepEqual(textById([...seen, ...rest]), { [answer.id]: LONG });
const ids = [...seen, ...rest].map((p) => p.id);
assert.equal(new Set(ids).size, ids.length);

// cancel a background run; the thread goes on
const busy = await client.threads.create();
const run = await client.runs.create(busy.thread_id, "agent", {
  input: { messages: [{ type: "human", content: "talk" }] },
});
await client.runs.cancel(busy.thread_id, run.run_id);
await client.runs.join(busy.thread_id, run.run_id);
assert.equal((await client.runs.get(busy.thread_id, run.run_id)).status, "interrupted");

// delete
await client.threads.delete(thread.thread_id);
await status404(client.threads.get(thread.thread_id));

console.log(JSON.stringify({ ok: true, thread: thread.thread_id, rejoined: rest.length }));
