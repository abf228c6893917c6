// The official AG-UI client (@ag-ui/client's HttpAgent, pinned in package.json) against POST /agui/<agent_id>.
// Usage: node scenarios.mjs <scenario> <agent url> <threadId> [JSON args]; prints one JSON object.
// The client verifies every stream itself (RUN_STARTED first, one terminal event, messages opened before use).
import { HttpAgent, randomUUID } from "@ag-ui/client";

const [scenario, url, threadId, rawArgs] = process.argv.slice(2);
const args = rawArgs ? JSON.parse(rawArgs) : {};
const headers = args.apiKey ? { Authorization: `Bearer ${args.apiKey}` } : {};

function agent(extra = {}) {
  return new HttpAgent({ url, threadId, headers, ...extra });
}

function recorder() {
  const types = [];
  const errors = [];
  const onEvent = ({ event }) => {
    types.push(event.type);
    if (event.type === "RUN_ERROR") errors.push(`${event.code}: ${event.message}`);
  };
  return { types, errors, subscriber: { onEvent } };
}

function say(a, text) {
  a.addMessage({ id: randomUUID(), role: "user", content: text });
}

function brief(messages) {
  return messages.map((m) => ({ role: m.role, content: m.content ?? null, toolCalls: m.toolCalls ?? [], toolCallId: m.toolCallId ?? null }));
}

async function failure(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return String(error?.message ?? error);
  }
}

// Every event as (type, subagentRunId, parentSubagentRunId): who did what in one stream of a run tree.
function tree() {
  const events = [];
  const onEvent = ({ event }) => {
    events.push([event.type, event.subagentRunId ?? null, event.parentSubagentRunId ?? null]);
  };
  return { events, subscriber: { onEvent } };
}

const scenarios = {
  // A user message with an image and a document (AG-UI 1.0 multimodal parts), then a second turn on the thread.
  async multimodal() {
    const a = agent();
    const content = [
      { type: "text", text: "What are these?" },
      { type: "image", source: { type: "data", value: args.image, mimeType: "image/png" } },
      { type: "document", source: { type: "data", value: args.pdf, mimeType: "application/pdf" }, metadata: { filename: "report.pdf" } },
    ];
    a.addMessage({ id: randomUUID(), role: "user", content });
    const first = recorder();
    await a.runAgent({}, first.subscriber);
    say(a, "and which is bigger?");
    const second = recorder();
    await a.runAgent({}, second.subscriber);
    return { first: first.types, second: second.types, errors: [...first.errors, ...second.errors], messages: brief(a.messages) };
  },

  async subagents() {
    const a = agent();
    say(a, args.message ?? "research");
    const first = tree();
    await a.runAgent({}, first.subscriber);
    const interrupts = a.pendingInterrupts.map((i) => ({ ...i }));
    let second = null;
    if (interrupts.length) {
      const resume = interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }));
      second = tree();
      await a.runAgent({ resume }, second.subscriber);
    }
    return { first: first.events, interrupts, second: second && second.events, messages: brief(a.messages) };
  },

  async text() {
    const a = agent();
    const { types, subscriber } = recorder();
    say(a, args.message ?? "hi");
    const { newMessages } = await a.runAgent({}, subscriber);
    return { types, newMessages: brief(newMessages), messages: brief(a.messages) };
  },

  // One run (its runId given) read live to its end, a worker maybe killed meanwhile: every event's type, the messages.
  async live() {
    const a = agent();
    const { types, errors, subscriber } = recorder();
    say(a, args.message ?? "hi");
    await a.runAgent({ runId: args.runId }, subscriber);
    return { types, errors, messages: brief(a.messages) };
  },

  async interrupt() {
    const a = agent();
    say(a, "delete it");
    const paused = recorder();
    await a.runAgent({}, paused.subscriber);
    const interrupts = a.pendingInterrupts.map((i) => ({ ...i }));
    // Another tab on the thread, knowing nothing of the interrupt, sends a new message: refused (RUN_ERROR).
    const other = agent({ initialMessages: a.messages });
    say(other, "something else");
    const refusal = recorder();
    const thrown = await failure(other.runAgent({}, refusal.subscriber));
    const refused = refusal.errors.join("; ") || thrown;
    const resume = interrupts.map((i) => ({
      interruptId: i.id,
      status: "resolved",
      payload: { approved: true, editedArgs: { path: args.edited } },
    }));
    const resumed = recorder();
    await a.runAgent({ resume }, resumed.subscriber);
    // The same resume sent again under a new runId (a retried request): attaches, runs nothing again.
    const again = agent({ initialMessages: a.messages });
    const replay = recorder();
    const replayError = await failure(again.runAgent({ resume }, replay.subscriber));
    return {
      pausedTypes: paused.types,
      interrupts,
      refused,
      resumedTypes: resumed.types,
      pendingAfter: a.pendingInterrupts.length,
      messages: brief(a.messages),
      replayTypes: replay.types,
      replayError: replayError ?? (replay.errors.join("; ") || null),
    };
  },

  async frontend() {
    const tools = [
      {
        name: "pick_color",
        description: "Ask the user to pick a color.",
        parameters: { type: "object", properties: { options: { type: "array", items: { type: "string" } } } },
      },
    ];
    const a = agent();
    say(a, "pick one");
    const first = recorder();
    await a.runAgent({ tools }, first.subscriber);
    const call = a.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.function.name === "pick_color");
    a.addMessage({ id: randomUUID(), role: "tool", toolCallId: call.id, content: "red" });
    const second = recorder();
    await a.runAgent({ tools }, second.subscriber);
    return { firstTypes: first.types, call, secondTypes: second.types, messages: brief(a.messages) };
  },

  async sameRunId() {
    const messages = [{ id: "m-1", role: "user", content: "hi" }];
    const results = [];
    for (let i = 0; i < 2; i++) {
      const a = agent({ initialMessages: messages });
      const { newMessages } = await a.runAgent({ runId: args.runId });
      results.push(brief(newMessages));
    }
    return { results };
  },

  async connect() {
    // HttpAgent leaves connect() to the application; ours POSTs the input to the endpoint's /connect.
    class Reconnecting extends HttpAgent {
      connect(input) {
        return this.run(input);
      }
    }
    const a = new Reconnecting({ url: `${url}/connect`, threadId, headers });
    const { types, subscriber } = recorder();
    await a.connectAgent({ runId: args.runId }, subscriber);
    return { types, messages: brief(a.messages) };
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}; known: ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
console.log(JSON.stringify(await run()));
