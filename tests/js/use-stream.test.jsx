// useStream (the React hook most LangGraph chat frontends are built on) against cs-agent's
// /lg surface, unmodified: submit a message, render the streamed tokens, show the pending
// confirmation, approve it, see the final answer. Run by tests/integration/test_lg_js_sdk.py
// with LG_URL and LG_TOKEN, against the scripted model that test sets up.
import { useStream } from "@langchain/langgraph-sdk/react";
import { act, cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, expect, test } from "vitest";

const FINAL = "Done: your order is cancelled and the refund is on its way to your card.";
const rendered = [];

function Chat() {
  const stream = useStream({
    apiUrl: process.env.LG_URL,
    apiKey: process.env.LG_TOKEN,
    assistantId: "agent",
    messagesKey: "messages",
  });
  const ai = stream.messages.filter((m) => m.type === "ai" && typeof m.content === "string");
  const last = ai.at(-1)?.content ?? "";
  rendered.push(last);
  const request = stream.interrupt?.value?.action_requests?.[0];
  return (
    <main>
      <button
        onClick={() =>
          stream.submit({ messages: [{ type: "human", content: "cancel my order please" }] })
        }
      >
        send
      </button>
      <ol aria-label="messages">
        {stream.messages.map((m, i) => (
          <li key={m.id ?? i} data-type={m.type}>
            {typeof m.content === "string" ? m.content : ""}
          </li>
        ))}
      </ol>
      {request && (
        <section aria-label="confirmation">
          <p>{request.description}</p>
          <button
            onClick={() =>
              stream.submit(null, {
                command: { resume: { decisions: [{ type: "approve" }] } },
              })
            }
          >
            approve
          </button>
        </section>
      )}
      <output aria-label="loading">{String(stream.isLoading)}</output>
      {stream.error && <p role="alert">{String(stream.error)}</p>}
    </main>
  );
}

afterEach(cleanup);

test("submit, stream tokens, show the interrupt, approve, see the final answer", async () => {
  render(<Chat />);
  await act(async () => fireEvent.click(screen.getByText("send")));

  const confirmation = await screen.findByLabelText("confirmation", {}, { timeout: 30_000 });
  expect(confirmation.textContent).toContain("#W2611340");
  await waitFor(() => expect(screen.getByLabelText("loading").textContent).toBe("false"));

  await act(async () => fireEvent.click(screen.getByText("approve")));
  await waitFor(
    () => {
      const items = screen.getAllByRole("listitem");
      expect(items.at(-1).textContent).toBe(FINAL);
      expect(screen.getByLabelText("loading").textContent).toBe("false");
    },
    { timeout: 30_000 },
  );
  expect(screen.queryByLabelText("confirmation")).toBeNull();
  expect(screen.queryByRole("alert")).toBeNull();
  // the answer was shown while it streamed: some render held a part of it, not all
  const partial = rendered.filter((t) => t && t !== FINAL && FINAL.startsWith(t));
  expect(partial.length).toBeGreaterThan(0);
  const types = screen.getAllByRole("listitem").map((li) => li.dataset.type);
  expect(types[0]).toBe("human");
});
