// Connections and channels, as the management API lists them; a connection can be closed.
"use strict";

import * as api from "./api.js";
import { enc } from "./api.js";
import { Table, act, card, confirmDialog, fmtInt, fmtRate, fmtTime, h, rate, tableFilter } from "./ui.js";

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
  const filterBox = tableFilter(table, "connections");
  // the stream protocol's publishers and consumers (rabbitmq_stream_management's lists)
  const conn = (x) => h("span", { title: (x.connection_details || {}).name }, (x.connection_details || {}).name || "");
  const stream = (x) => `${(x.queue || {}).name} (${(x.queue || {}).vhost})`;
  const publishers = new Table(
    [
      { title: "Connection", sort: (x) => (x.connection_details || {}).name || "", render: conn },
      { key: "publisher_id", title: "Id", num: true },
      { title: "Stream", sort: stream, render: stream },
      { key: "reference", title: "Reference" },
      { key: "published", title: "Published", num: true, render: (x) => fmtInt(x.published) },
      { key: "confirmed", title: "Confirmed", num: true, render: (x) => fmtInt(x.confirmed) },
      { key: "errored", title: "Errored", num: true, render: (x) => fmtInt(x.errored) },
    ],
    { empty: "No stream publishers.", id: "stream-publishers-table" },
  );
  const consumers = new Table(
    [
      { title: "Connection", sort: (x) => (x.connection_details || {}).name || "", render: conn },
      { key: "subscription_id", title: "Id", num: true },
      { title: "Stream", sort: stream, render: stream },
      { key: "consumed", title: "Consumed", num: true, render: (x) => fmtInt(x.consumed) },
      { key: "offset", title: "Offset", num: true },
      { key: "offset_lag", title: "Lag", num: true },
      { key: "credits", title: "Credits", num: true },
    ],
    { empty: "No stream consumers.", id: "stream-consumers-table" },
  );
  const el = h(
    "div.page",
    card(null, h("div.card-head", h("h2", "Connections"), filterBox), table.el),
    card(null, h("div.card-head", h("h2", "Stream publishers")), publishers.el),
    card(null, h("div.card-head", h("h2", "Stream consumers")), consumers.el),
  );

  async function closeConnection(c) {
    const how =
      c.protocol === "stream" ? "Its socket is closed."
      : c.type === "direct" ? "It is an AMQP 1.0 session: the session ends (amqp:internal-error), its connection stays open."
      : c.protocol === "AMQP 1-0" ? "The client gets close with amqp:connection:forced."
      : "The client gets connection.close with 320 CONNECTION_FORCED.";
    if (!(await confirmDialog("Close connection", `Close ${c.name}? ${how}`, { okLabel: "Close connection" }))) return;
    const ok = await act(null, () => api.del(`/connections/${enc(c.name)}`, { "X-Reason": "Closed via the Leveret dashboard" }), "Connection closed");
    if (ok !== undefined) refresh();
  }

  async function refresh() {
    const [all, pubs, subs] = await Promise.all([api.get("/connections"), api.get("/stream/publishers"), api.get("/stream/consumers")]);
    table.set(all);
    publishers.set(pubs);
    consumers.set(subs);
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
  const filterBox = tableFilter(table, "channels");
  const el = h("div.page", card(null, h("div.card-head", h("h2", "Channels"), filterBox), h("p.muted.small", "Mode: C confirm, T transactional."), table.el));
  async function refresh() {
    table.set(await api.get("/channels"));
  }
  return { title: "Channels", el, refresh };
}
