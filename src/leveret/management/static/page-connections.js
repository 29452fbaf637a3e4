// Connections and channels, as the management API lists them; a connection can be closed.
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";
import { Table, act, card, confirmDialog, fmtInt, fmtRate, fmtTime, h, rate } from "./ui.js";

export function connectionsPage() {
  const table = new Table(
    [
      { key: "name", title: "Name", render: (c) => h("span", { title: c.name }, c.user_provided_name || c.name) },
      { key: "user", title: "User" },
      { key: "vhost", title: "Virtual host" },
      { key: "state", title: "State" },
      { key: "channels", title: "Channels", num: true },
      { title: "Client", sort: (c) => (c.client_properties || {}).product || "", render: (c) => [(c.client_properties || {}).product, (c.client_properties || {}).version].filter(Boolean).join(" ") },
      { key: "protocol", title: "Protocol" },
      { key: "connected_at", title: "Connected", render: (c) => fmtTime(c.connected_at) },
      { title: "", render: (c) => h("button.small", { type: "button", onclick: () => closeConnection(c) }, "Close") },
    ],
    { empty: "No connections.", id: "connections-table" },
  );
  const filterBox = h("input.filter", { type: "search", placeholder: "Filter connections  ( / )", "data-search": "", "aria-label": "Filter connections", oninput: () => table.filter(filterBox.value) });
  const el = h("div.page", card(null, h("div.card-head", h("h2", "Connections"), filterBox), table.el));

  async function closeConnection(c) {
    if (!(await confirmDialog("Close connection", `Close ${c.name}? The client gets connection.close with 320 CONNECTION_FORCED.`, { okLabel: "Close connection" }))) return;
    const ok = await act(null, () => api.del(`/connections/${enc(c.name)}`, { "X-Reason": "Closed via the Leveret dashboard" }), "Connection closed");
    if (ok !== undefined) refresh();
  }

  async function refresh() {
    table.set(await api.get("/connections"));
  }
  return { title: "Connections", el, refresh };
}

export function channelsPage() {
  const table = new Table(
    [
      { key: "name", title: "Channel" },
      { key: "user", title: "User" },
      { key: "vhost", title: "Virtual host" },
      { title: "Mode", render: (c) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].filter(Boolean).join(" ") },
      { key: "prefetch_count", title: "Prefetch", num: true },
      { key: "consumer_count", title: "Consumers", num: true },
      { key: "messages_unacknowledged", title: "Unacked", num: true, render: (c) => fmtInt(c.messages_unacknowledged) },
      { title: "Publish", num: true, render: (c) => fmtRate(rate(c.message_stats, "publish")) },
      { title: "Deliver / get", num: true, render: (c) => fmtRate(rate(c.message_stats, "deliver_get")) },
      { title: "Ack", num: true, render: (c) => fmtRate(rate(c.message_stats, "ack")) },
    ],
    { empty: "No channels.", id: "channels-table" },
  );
  const filterBox = h("input.filter", { type: "search", placeholder: "Filter channels  ( / )", "data-search": "", "aria-label": "Filter channels", oninput: () => table.filter(filterBox.value) });
  const el = h("div.page", card(null, h("div.card-head", h("h2", "Channels"), filterBox), h("p.muted.small", "Mode: C confirm, T transactional."), table.el));
  async function refresh() {
    table.set(await api.get("/channels"));
  }
  return { title: "Channels", el, refresh };
}
