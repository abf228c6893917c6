// The AI SDK's own chat client (npm `ai`: AbstractChat + DefaultChatTransport, as useChat runs it) against
// POST {api} and GET {api}/{id}/stream. Usage: node scenarios.mjs <scenario> <api> <chatId> <json args>.
// Prints one JSON line: the chat's messages, status, error, and the raw stream text of each request.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";
import { WorkflowChatTransport } from "@ai-sdk/workflow/client";

const [scenario, api, chatId, rawArgs] = process.argv.slice(2);
const args = JSON.parse(rawArgs || "{}");
const requests = []; // {method, url, status, body} of every request the transport made

// A fetch that records what each response streamed (the client reads a tee of it).
async function recordingFetch(url, init = {}) {
  const res = await fetch(url, init);
  const entry = { method: init.method || "GET", url: String(url), status: res.status, body: "", headers: {} };
  for (const name of ["x-vercel-ai-ui-message-stream", "x-workflow-run-id", "content-type"]) {
    if (res.headers.get(name)) entry.headers[name] = res.headers.get(name);
  }
  requests.push(entry);
  if (!res.body) return res;
  const [mine, theirs] = res.body.tee();
  (async () => {
    const reader = mine.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        entry.body += decoder.decode(value, { stream: true });
      }
    } catch (e) {
      entry.aborted = true;
    }
  })();
  return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
}

class State {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (v) => structuredClone(v);
}

class Chat extends AbstractChat {
  constructor({ messages, ...options }) {
    super({ ...options, state: new State(messages) });
  }
}

function transport(extra = {}) {
  return new DefaultChatTransport({ api, fetch: recordingFetch, headers: args.headers || {}, ...extra });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, predicate, ms = 60000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function text(message) {
  return (message?.parts || []).filter((p) => p.type === "text").map((p) => p.text).join("");
}

function last(chat) {
  return chat.messages[chat.messages.length - 1];
}

function toolParts(message) {
  return (message?.parts || []).filter((p) => p.type.startsWith("tool-") || p.type === "dynamic-tool");
}

const errors = [];
function newChat({ transport: extra, ...options } = {}) {
  return new Chat({ id: chatId, transport: transport(extra), onError: (e) => errors.push(String(e)), ...options });
}

function report(chat, extra = {}) {
  const out = { status: chat.status, error: chat.error ? String(chat.error) : null, errors, messages: chat.messages, requests, ...extra };
  process.stdout.write(JSON.stringify(out) + "\n");
}

async function settle(chat, requestsAtLeast = 1) {
  await until("the chat to settle", () => requests.length >= requestsAtLeast && (chat.status === "ready" || chat.status === "error"));
  await sleep(20); // the recording tee reads its last bytes
}

// A fetch whose POST responses break after `cutAfter` SSE frames (a dropped connection, a function timeout):
// the transport sees an error mid-stream, as when the network goes.
function cuttingFetch(cutAfter) {
  return async (url, init = {}) => {
    const res = await recordingFetch(url, init);
    if ((init.method || "GET") !== "POST" || !res.body) return res;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let frames = 0;
    const body = new ReadableStream({
      async pull(controller) {
        const { value, done } = await reader.read();
        if (done) return controller.close();
        const piece = decoder.decode(value, { stream: true });
        frames += (piece.match(/\n\n/g) || []).length;
        controller.enqueue(value);
        if (frames >= cutAfter) {
          reader.cancel();
          controller.error(new Error("connection dropped"));
        }
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

const scenarios = {
  // @ai-sdk/workflow's WorkflowChatTransport with its defaults (the POST body is only the messages): the POST's
  // stream drops after a few frames and the transport reconnects by chunk index (GET {api}/{runId}/stream
  // ?startIndex=N); then a reloaded page resumes the run's tail (initialStartIndex < 0).
  async workflow() {
    let runId = null;
    const chat = new Chat({
      id: chatId,
      transport: new WorkflowChatTransport({
        api,
        fetch: cuttingFetch(args.cutAfter || 4),
        onChatSendMessage: (res) => { runId = res.headers.get("x-workflow-run-id"); },
      }),
      onError: (e) => errors.push(String(e)),
    });
    await chat.sendMessage({ text: args.text || "go" });
    await settle(chat, 2);
    const tail = new Chat({
      id: chatId,
      messages: chat.messages.slice(0, 1),
      transport: new WorkflowChatTransport({
        api,
        fetch: recordingFetch,
        initialStartIndex: args.tail || -3,
        prepareReconnectToStreamRequest: ({ api: base }) => ({ api: `${api}/${runId}/stream` }),
      }),
      onError: (e) => errors.push(String(e)),
    });
    await tail.resumeStream();
    await settle(tail, 3);
    report(chat, { runId, tail: { status: tail.status, messages: tail.messages } });
  },

  // The second message of a WorkflowChatTransport chat: only the messages again; ours finds the chat from them.
  async workflowTwice() {
    const chat = new Chat({
      id: chatId,
      transport: new WorkflowChatTransport({ api, fetch: recordingFetch }),
      onError: (e) => errors.push(String(e)),
    });
    await chat.sendMessage({ text: args.text || "go" });
    await settle(chat);
    await chat.sendMessage({ text: args.again || "again" });
    await settle(chat, 2);
    report(chat);
  },

  // One message, streamed to its end.
  async text() {
    const chat = newChat();
    await chat.sendMessage({ text: args.text || "hi", ...(args.files ? { files: args.files } : {}) });
    await settle(chat);
    report(chat);
  },

  // A tool that needs a confirmation: approve (or deny with a reason); the chat sends the answer by itself.
  async approve() {
    const chat = newChat({ sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
    await chat.sendMessage({ text: args.text || "go" });
    await settle(chat);
    const asked = toolParts(last(chat)).find((p) => p.state === "approval-requested");
    if (!asked) return report(chat, { asked: null });
    const pausedMessage = structuredClone(last(chat));
    if (args.edit) { // the page edits the call's input before approving it
      const i = chat.messages.length - 1;
      const message = last(chat);
      chat.state.replaceMessage(i, { ...message, parts: message.parts.map((p) => (p === asked ? { ...p, input: args.edit } : p)) });
    }
    await chat.addToolApprovalResponse({ id: asked.approval.id, approved: args.approved !== false, reason: args.reason });
    await settle(chat, 2);
    report(chat, { asked, pausedMessage });
  },

  // A tool the page runs itself: onToolCall answers it with addToolOutput; the chat sends the output by itself.
  async clientTool() {
    let chat;
    chat = newChat({
      transport: { body: { tools: args.tools } },
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
      onToolCall: ({ toolCall }) => {
        chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: args.output });
      },
    });
    await chat.sendMessage({ text: args.text || "go" });
    await settle(chat, 2);
    report(chat);
  },

  // The page's stop button: the stop route, and the fetch aborted (chat.stop()); then the run's state.
  async stop() {
    const chat = newChat();
    const sent = chat.sendMessage({ text: args.text || "go" });
    await until("some text", () => text(last(chat)).length > 0 && last(chat).role === "assistant");
    const t0 = Date.now();
    const stopped = await fetch(`${api}/${chatId}/stop`, { method: "POST", headers: args.headers || {} });
    const stopBody = await stopped.json();
    await until("the stream to end", () => chat.status === "ready" || chat.status === "error", 10000);
    await sent;
    await sleep(20);
    report(chat, { stopBody, stopMs: Date.now() - t0 });
  },

  // The page closed mid-answer (its fetch aborted: NOT a stop), then a new page resumes the chat
  // (resumeStream: GET {api}/{id}/stream) to the whole answer, and once more after the end (204).
  async closeAndResume() {
    const first = newChat();
    first.sendMessage({ text: args.text || "go" });
    await until("some text", () => last(first)?.role === "assistant" && text(last(first)).length >= (args.atLeast || 1));
    const userMessage = first.messages.find((m) => m.role === "user");
    const partial = text(last(first));
    await first.stop(); // what a closed tab does to the fetch
    const second = newChat({ messages: [userMessage] });
    await second.resumeStream();
    await settle(second, 2);
    const resumed = structuredClone(second.messages);
    const third = newChat({ messages: [userMessage] });
    await third.resumeStream();
    await settle(third, 3);
    report(second, { partial, resumed, afterEnd: { status: third.status, messages: third.messages } });
  },

  // Resume a chat another process started (nothing else).
  async resume() {
    const chat = newChat({ messages: args.messages || [] });
    await chat.resumeStream();
    await settle(chat);
    report(chat);
  },

  // Answer, then regenerate the answer.
  async regenerate() {
    const chat = newChat();
    await chat.sendMessage({ text: args.text || "go" });
    await settle(chat);
    const firstAnswer = text(last(chat));
    await chat.regenerate();
    await settle(chat, 2);
    report(chat, { firstAnswer });
  },
};

try {
  await scenarios[scenario]();
} catch (err) {
  process.stdout.write(JSON.stringify({ failed: String(err && err.stack || err), errors, requests }) + "\n");
  process.exitCode = 1;
}
