// Who is signed in: the bearer token (kept in sessionStorage), the demo sign-in panel, and a
// token handed over by an embedding site in production.

import { userMessage } from "./api.js";
import { clear, h } from "./dom.js";

const TOKEN_KEY = "cs-agent.token";
const NAME_KEY = "cs-agent.name";

export function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token, name = "") {
  sessionStorage.setItem(TOKEN_KEY, token);
  sessionStorage.setItem(NAME_KEY, name);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(NAME_KEY);
}

export function storedName() {
  return sessionStorage.getItem(NAME_KEY) || "";
}

/**
 * A token provided by the page that embeds the chat: `window.CS_AGENT_TOKEN`, or a
 * `#token=...` fragment (removed from the address bar once read, so it is not shared).
 */
export function embeddedToken() {
  if (typeof window.CS_AGENT_TOKEN === "string" && window.CS_AGENT_TOKEN) {
    return window.CS_AGENT_TOKEN;
  }
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");
  if (token) {
    fragment.delete("token");
    const rest = fragment.toString();
    history.replaceState(null, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
    return token;
  }
  return null;
}

/** The token's claims, for display only (the server verifies the signature). */
export function claimsOf(token) {
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const json = atob(payload.padEnd(payload.length + ((4 - (payload.length % 4)) % 4), "="));
    return JSON.parse(decodeURIComponent(escape(json)));
  } catch {
    return {};
  }
}

/**
 * Fill the sign-in panel. Resolves to {token, name} once someone signs in; in production
 * (no demo sign-in) it explains that the embedding site must provide a token.
 */
export function showSignIn(panel, api, message = "") {
  return new Promise((resolve) => {
    const status = h("p", { class: "signin-status", role: "alert", dataset: { testid: "signin-message" } }, message);
    const list = h("ul", { class: "customers", dataset: { testid: "signin-customers" } });
    const guest = h(
      "button",
      { type: "button", class: "guest", dataset: { testid: "signin-guest" } },
      "Continue as guest",
    );
    clear(panel).append(
      h("h1", {}, "Customer service"),
      h("p", { class: "muted" }, "Demo sign-in: pick one of the shop's customers, or continue as a guest."),
      list,
      guest,
      status,
    );

    const signIn = async (role, userId, name) => {
      panel.querySelectorAll("button").forEach((b) => (b.disabled = true));
      status.textContent = "Signing in …";
      try {
        const { token } = await api.demoLogin(role, userId);
        resolve({ token, name });
      } catch (error) {
        status.textContent = userMessage(error);
        panel.querySelectorAll("button").forEach((b) => (b.disabled = false));
      }
    };
    guest.addEventListener("click", () => signIn("guest", null, "Guest"));

    api.demoCustomers().then(
      (customers) => {
        for (const c of customers) {
          list.append(
            h(
              "li",
              {},
              h(
                "button",
                {
                  type: "button",
                  class: "customer",
                  dataset: { testid: "signin-customer", userId: c.user_id },
                  onclick: () => signIn("customer", c.user_id, c.name),
                },
                h("span", { class: "customer-name" }, c.name),
                h("span", { class: "customer-email" }, c.email),
              ),
            ),
          );
        }
        if (!customers.length) list.append(h("li", { class: "muted" }, "No demo customers: seed the database."));
      },
      (error) => {
        if (error.status === 404) {
          clear(panel).append(
            h("h1", {}, "Customer service"),
            h(
              "p",
              { dataset: { testid: "signin-unavailable" } },
              "Please sign in on the website that brought you here; it opens this chat for you.",
            ),
          );
        } else {
          status.textContent = userMessage(error);
        }
      },
    );
  });
}
