// A useChat page for agents-celery's AI SDK door (POST {api}, GET {api}/{chatId}/stream, POST {api}/{chatId}/stop).
// The chat id lives in the URL (?chat=...), so a reload asks GET {api}/{chatId}/stream (resume: true) and the
// live answer comes back whole. The API prefix is the root element's data-api-prefix; the agent is ?agent=.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, getToolName, isToolUIPart, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useMemo, useState } from "react";
import { createRoot } from "react-dom/client";

function Chat({ api, chatId }) {
  const transport = useMemo(() => new DefaultChatTransport({ api }), [api]);
  const { messages, sendMessage, addToolApprovalResponse, status, error, stop } = useChat({
    id: chatId, // the chat: the agents-celery session
    transport,
    resume: true, // a reload resumes the live answer: GET {api}/{chatId}/stream
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses, // an approval continues the run
  });
  const [input, setInput] = useState("");
  const busy = status === "submitted" || status === "streaming";

  // chat.stop() only aborts the fetch, which the server takes for a closed tab: the run goes on. The stop
  // route stops the run itself (its stream then ends with an abort chunk); stop() lets the fetch go.
  const stopRun = async () => {
    await fetch(`${api}/${encodeURIComponent(chatId)}/stop`, { method: "POST" });
    await stop();
  };
  const send = (event) => {
    event.preventDefault();
    if (!input.trim()) return;
    sendMessage({ text: input });
    setInput("");
  };

  return (
    <main>
      <ol id="messages">
        {messages.map((message) => (
          <li key={message.id} className={`message ${message.role}`} data-message-id={message.id}>
            {message.parts.map((part, i) => <Part key={i} part={part} respond={addToolApprovalResponse} />)}
          </li>
        ))}
      </ol>
      {error && <p id="error">{String(error.message || error)}</p>}
      <form id="composer" onSubmit={send}>
        <input aria-label="Message" value={input} onChange={(e) => setInput(e.target.value)} placeholder="Ask..." />
        <button type="submit" disabled={busy}>Send</button>
        <button type="button" id="stop" onClick={stopRun} disabled={!busy}>Stop</button>
      </form>
      <p id="status">{status}</p>
    </main>
  );
}

function Part({ part, respond }) {
  if (part.type === "text") return <span className="text">{part.text}</span>;
  if (!isToolUIPart(part)) return null; // reasoning, step boundaries, data-* parts: not shown here
  return (
    <div className="tool" data-tool-call-id={part.toolCallId} data-state={part.state}>
      <code>{getToolName(part)}({JSON.stringify(part.input ?? {})})</code>
      {part.state === "approval-requested" && (
        <span className="approval">
          <button onClick={() => respond({ id: part.approval.id, approved: true })}>Approve</button>
          <button onClick={() => respond({ id: part.approval.id, approved: false, reason: "denied on the page" })}>
            Deny
          </button>
        </span>
      )}
      {part.state === "output-available" && <span className="output">{JSON.stringify(part.output)}</span>}
      {part.state === "output-error" && <span className="output error">{part.errorText}</span>}
      {part.state === "output-denied" && <span className="output denied">denied</span>}
    </div>
  );
}

// The chat id: from the URL, or a new one written into it (replaceState) so that a reload keeps it.
function chatIdFromUrl() {
  const url = new URL(window.location.href);
  let id = url.searchParams.get("chat");
  if (!id) {
    id = Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
    url.searchParams.set("chat", id);
    window.history.replaceState(null, "", url);
  }
  return id;
}

const root = document.getElementById("root");
const agent = new URL(window.location.href).searchParams.get("agent") || "assistant";
const api = `${root.dataset.apiPrefix || ""}/aisdk/${encodeURIComponent(agent)}`;
createRoot(root).render(<Chat api={api} chatId={chatIdFromUrl()} />);
