// Generated from the tool specs (app/tools/*.py) by `python -m app.tools.labels`;
// do not edit. `{order}` reads 'order #W…', any other `{name}` the argument;
// `done` is the line for a successful result whose own words are not for the customer.
export const TOOL_LABELS = {
  "find_user_id_by_email": {
    "label": "Looking up your account …",
    "done": "Account found"
  },
  "find_user_id_by_name_zip": {
    "label": "Looking up your account …",
    "done": "Account found"
  },
  "confirm_identity": {
    "label": "Checking your code …",
    "done": "Identity confirmed"
  },
  "get_user_details": {
    "label": "Fetching your account details …",
    "done": "Account details found"
  },
  "get_order_status": {
    "label": "Checking the status of {order} …"
  },
  "get_order_details": {
    "label": "Looking up {order} …"
  },
  "get_product_details": {
    "label": "Looking up product {product_id} …",
    "fallback": "Looking up a product …"
  },
  "list_all_product_types": {
    "label": "Browsing the catalogue …"
  },
  "calc_shipping": {
    "label": "Estimating shipping …"
  },
  "calculate": {
    "label": "Calculating …"
  },
  "search_help_center": {
    "label": "Searching the help centre …",
    "done": "Help centre searched"
  },
  "get_help_article": {
    "label": "Reading a help article …",
    "done": "Article read"
  },
  "remember_preference": {
    "label": "Noting your preference …"
  },
  "cancel_pending_order": {
    "label": "Cancelling {order} …"
  },
  "modify_pending_order_address": {
    "label": "Changing the address of {order} …"
  },
  "modify_pending_order_items": {
    "label": "Changing items in {order} …"
  },
  "modify_pending_order_payment": {
    "label": "Changing the payment of {order} …"
  },
  "return_delivered_order_items": {
    "label": "Requesting a return for {order} …"
  },
  "exchange_delivered_order_items": {
    "label": "Requesting an exchange for {order} …"
  },
  "modify_user_address": {
    "label": "Updating your address …",
    "done": "Address updated"
  },
  "transfer_to_human_agents": {
    "label": "Handing over to a human agent …",
    "done": "Handed over to a human agent"
  }
};
