// Friendly one-line descriptions of tool activity, and compact summaries of results.

const orderRef = (args) => {
  const id = String(args?.order_id ?? "").trim();
  if (!id) return "your order";
  return `order ${id.startsWith("#") ? id : `#${id}`}`;
};

const LABELS = {
  find_user_id_by_email: () => "Looking up your account …",
  find_user_id_by_name_zip: () => "Looking up your account …",
  confirm_identity: () => "Checking your code …",
  get_order_status: (a) => `Checking the status of ${orderRef(a)} …`,
  get_user_details: () => "Fetching your account details …",
  get_order_details: (a) => `Looking up ${orderRef(a)} …`,
  get_product_details: (a) =>
    a?.product_id ? `Looking up product ${a.product_id} …` : "Looking up a product …",
  list_all_product_types: () => "Browsing the catalogue …",
  calculate: () => "Calculating …",
  calc_shipping: () => "Estimating shipping …",
  think: () => "Thinking …",
  cancel_pending_order: (a) => `Cancelling ${orderRef(a)} …`,
  modify_pending_order_address: (a) => `Changing the address of ${orderRef(a)} …`,
  modify_pending_order_items: (a) => `Changing items in ${orderRef(a)} …`,
  modify_pending_order_payment: (a) => `Changing the payment of ${orderRef(a)} …`,
  modify_user_address: () => "Updating your address …",
  return_delivered_order_items: (a) => `Requesting a return for ${orderRef(a)} …`,
  exchange_delivered_order_items: (a) => `Requesting an exchange for ${orderRef(a)} …`,
  transfer_to_human_agents: () => "Handing over to a human agent …",
  search_help_center: () => "Searching the help centre …",
  get_help_article: () => "Reading a help article …",
  remember_preference: () => "Noting your preference …",
};

export function toolLabel(name, args) {
  const label = LABELS[name];
  if (label) {
    try {
      return label(args || {});
    } catch {
      /* odd arguments: fall through to the generic line */
    }
  }
  return `Running ${name || "a tool"} …`;
}

/** {kind: "ok"|"error"|"declined", text} for the collapsed line of a tool result. */
export function resultSummary(status, content) {
  const text = String(content ?? "").trim();
  if (status === "error") {
    const reason = text.replace(/^Error:\s*/i, "");
    return { kind: "error", text: `Failed: ${firstLine(reason, 120)}` };
  }
  if (/^Declined\b/.test(text)) return { kind: "declined", text: "Declined: nothing was changed" };
  if (/^Verification started\b/.test(text)) return { kind: "ok", text: "Done · if the details match an account, a code was emailed" };
  if (/^Not verified\b/.test(text)) return { kind: "error", text: firstLine(text, 120) };
  const gist = jsonGist(text) ?? firstLine(text, 80);
  return { kind: "ok", text: `Done${gist ? ` · ${gist}` : ""}` };
}

/** A few telling fields of a JSON result ("order_id #W1 · status pending"), or null. */
function jsonGist(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (Array.isArray(value)) return `${value.length} result${value.length === 1 ? "" : "s"}`;
  if (value === null || typeof value !== "object") return firstLine(String(value), 80);
  const scalar = (v) => ["string", "number", "boolean"].includes(typeof v);
  const keys = Object.keys(value).filter((k) => scalar(value[k]));
  keys.sort((a, b) => (b === "status") - (a === "status"));
  const parts = keys.slice(0, 3).map((k) => `${k.replace(/_/g, " ")} ${value[k]}`);
  return parts.length ? firstLine(parts.join(" · "), 100) : `${Object.keys(value).length} fields`;
}

function firstLine(text, limit) {
  const line = text.split("\n", 1)[0];
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}
